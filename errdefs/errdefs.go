// Package errdefs is stockade's one error vocabulary: every error a verb
// answers has one of five kinds (NotFound, Refused, Invalid, Unavailable,
// Internal), mapped once to the reply status on the wire and once to the
// CLI's exit code. Handlers build errors with the constructors here and
// answer with Reply; the client turns a reply back into an error of the
// same kind with FromReply; the CLI exits with ExitCode.
package errdefs

import (
	"errors"
	"fmt"

	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/messages"
)

// Kind is an error's kind. Values are explicit and stable.
type Kind int

// Kinds.
const (
	// KindInternal: a bug or an unexpected failure (exit 1).
	KindInternal Kind = 1
	// KindNotFound: no such sandbox, revision or client (exit 3).
	KindNotFound Kind = 2
	// KindRefused: not in this phase, or not allowed; the message names
	// what works instead (exit 4).
	KindRefused Kind = 3
	// KindInvalid: the request is wrong (a bad name, a policy with
	// errors at line:col); retrying it unchanged fails again (exit 2).
	KindInvalid Kind = 4
	// KindUnavailable: not now (a state write failed, no supervisor
	// session yet, no gateway); nothing changed, and a retry may work
	// (exit 5).
	KindUnavailable Kind = 5
)

// String names the kind.
func (k Kind) String() string {
	switch k {
	case KindNotFound:
		return "NotFound"
	case KindRefused:
		return "Refused"
	case KindInvalid:
		return "Invalid"
	case KindUnavailable:
		return "Unavailable"
	case KindInternal:
		return "Internal"
	default:
		return fmt.Sprintf("Kind(%d)", int(k))
	}
}

// Error is an error of a kind.
type Error struct {
	Kind Kind
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

func newf(k Kind, format string, args ...any) error {
	return &Error{Kind: k, Err: fmt.Errorf(format, args...)}
}

// NotFound returns an error of KindNotFound (format as fmt.Errorf: %w wraps).
func NotFound(format string, args ...any) error { return newf(KindNotFound, format, args...) }

// Refused returns an error of KindRefused.
func Refused(format string, args ...any) error { return newf(KindRefused, format, args...) }

// Invalid returns an error of KindInvalid.
func Invalid(format string, args ...any) error { return newf(KindInvalid, format, args...) }

// Unavailable returns an error of KindUnavailable.
func Unavailable(format string, args ...any) error { return newf(KindUnavailable, format, args...) }

// Internal returns an error of KindInternal.
func Internal(format string, args ...any) error { return newf(KindInternal, format, args...) }

// KindOf is the kind of err: the outermost *Error in its chain; nil is
// no kind (0); an error of no kind is Internal.
func KindOf(err error) Kind {
	if err == nil {
		return 0
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return KindInternal
}

// Is reports whether err is of kind k.
func Is(err error, k Kind) bool { return err != nil && KindOf(err) == k }

// Status is the reply status of kind k (the one mapping to the wire).
func Status(k Kind) messages.Status {
	switch k {
	case 0:
		return messages.Status_STATUS_OK
	case KindNotFound:
		return messages.Status_STATUS_NOT_FOUND
	case KindRefused:
		return messages.Status_STATUS_REFUSED
	case KindInvalid:
		return messages.Status_STATUS_INVALID
	case KindUnavailable:
		return messages.Status_STATUS_UNAVAILABLE
	default:
		return messages.Status_STATUS_INTERNAL
	}
}

// KindOfStatus is the kind of a reply status (OK: 0). UNAUTHENTICATED is
// Refused: the caller may not.
func KindOfStatus(s messages.Status) Kind {
	switch s {
	case messages.Status_STATUS_OK:
		return 0
	case messages.Status_STATUS_NOT_FOUND:
		return KindNotFound
	case messages.Status_STATUS_REFUSED, messages.Status_STATUS_UNAUTHENTICATED:
		return KindRefused
	case messages.Status_STATUS_INVALID:
		return KindInvalid
	case messages.Status_STATUS_UNAVAILABLE:
		return KindUnavailable
	default:
		return KindInternal
	}
}

// ExitCode is the CLI's exit code for kind k (the one mapping to exit
// codes; contract lists them).
func ExitCode(k Kind) int {
	switch k {
	case 0:
		return contract.ExitOK
	case KindNotFound:
		return contract.ExitNotFound
	case KindRefused:
		return contract.ExitRefused
	case KindInvalid:
		return contract.ExitUsage
	case KindUnavailable:
		return contract.ExitUnreachable
	default:
		return contract.ExitFailure
	}
}

// Reply is the reply carrying err (nil: OK) as its status and message.
func Reply(err error) *messages.Reply {
	if err == nil {
		return &messages.Reply{Status: messages.Status_STATUS_OK}
	}
	return &messages.Reply{Status: Status(KindOf(err)), Message: err.Error()}
}

// FromReply is the error a reply carries (nil when it is OK), of the
// kind its status maps to.
func FromReply(r *messages.Reply) error {
	k := KindOfStatus(r.GetStatus())
	if k == 0 {
		return nil
	}
	msg := r.GetMessage()
	if msg == "" {
		msg = fmt.Sprintf("the gateway answered %s with no message", r.GetStatus())
	}
	return &Error{Kind: k, Err: errors.New(msg)}
}
