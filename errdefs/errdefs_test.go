package errdefs

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/messages"
)

// TestRoundTrip: every kind survives error -> reply -> error, keeps its
// message, and maps to the exit code README.md documents.
func TestRoundTrip(t *testing.T) {
	cases := []struct {
		err  error
		kind Kind
		exit int
	}{
		{NotFound("no sandbox named %q", "x"), KindNotFound, contract.ExitNotFound},
		{Refused("sandbox x is Stopped"), KindRefused, contract.ExitRefused},
		{Invalid("bad name"), KindInvalid, contract.ExitUsage},
		{Unavailable("save state: %w", errors.New("disk full")), KindUnavailable, contract.ExitUnreachable},
		{Internal("bug"), KindInternal, contract.ExitFailure},
		{errors.New("no kind"), KindInternal, contract.ExitFailure},
		{fmt.Errorf("wrapped: %w", Refused("inner")), KindRefused, contract.ExitRefused},
	}
	for _, c := range cases {
		r := Reply(c.err)
		back := FromReply(r)
		if KindOf(c.err) != c.kind || KindOf(back) != c.kind || back.Error() != c.err.Error() {
			t.Errorf("%v: kind %s, over the wire %s %q; want %s", c.err, KindOf(c.err), KindOf(back), back, c.kind)
		}
		if got := ExitCode(KindOf(back)); got != c.exit {
			t.Errorf("%v: exit %d, want %d", c.err, got, c.exit)
		}
	}
	if r := Reply(nil); r.Status != messages.Status_STATUS_OK || FromReply(r) != nil || ExitCode(KindOf(nil)) != 0 {
		t.Errorf("nil error: %v", r)
	}
	inner := errors.New("disk full")
	if err := Unavailable("save: %w", inner); !errors.Is(err, inner) {
		t.Errorf("%%w is not kept: %v", err)
	}
	if k := KindOfStatus(messages.Status_STATUS_UNSPECIFIED); k != KindInternal {
		t.Errorf("unspecified status: %s", k)
	}
}
