// Package logx owns how stockade's processes build their loggers: zerolog
// for our code and protoactor's slog routed into the same zerolog output, so
// one process writes one log stream with one format.
package logx

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
)

// New returns a logger writing to w at level ("debug", "info", "warn",
// "error"); pretty selects the human console format instead of JSON lines.
// Call ConfigureGlobals once from main before.
func New(w io.Writer, level string, pretty bool) zerolog.Logger {
	return NewOn(NewOut(w, pretty), level)
}

// NewOn is New writing to o, for a caller that also writes several events
// at once (Out.WriteEvents).
func NewOn(o *Out, level string) zerolog.Logger {
	lvl, err := zerolog.ParseLevel(strings.ToLower(level))
	if err != nil || level == "" {
		lvl = zerolog.InfoLevel
	}
	return zerolog.New(o).Level(lvl).With().Timestamp().Logger()
}

// Out is a logger's destination. The logger hands it one event (one JSON
// line) per Write; WriteEvents takes the lines of several events rendered
// at once, so that a batch of decisions costs one write(2) instead of one
// per line.
type Out struct {
	w       io.Writer
	console *zerolog.ConsoleWriter // the human form: each event formatted on its own
}

// NewOut returns the destination w, in the console form when pretty.
func NewOut(w io.Writer, pretty bool) *Out {
	o := &Out{w: w}
	if pretty {
		o.console = &zerolog.ConsoleWriter{Out: w, TimeFormat: "15:04:05.000"}
	}
	return o
}

// Write implements io.Writer: p is one event.
func (o *Out) Write(p []byte) (int, error) {
	if o.console != nil {
		return o.console.Write(p)
	}
	return o.w.Write(p)
}

// atomicWrite is the most a write to a pipe delivers whole (PIPE_BUF):
// WriteEvents writes at most this much at once unless one line is longer,
// so that no other writer of the pipe can land inside a line, as with one
// write per event.
const atomicWrite = 4096

// WriteEvents writes the JSON lines of several events (each ending in a
// newline): to a JSON destination, as few writes as whole lines fit in
// atomicWrite bytes (a longer line alone); to the console form one line at
// a time, as it formats one event per call.
func (o *Out) WriteEvents(p []byte) error {
	for len(p) > 0 {
		n := lineEnd(p, 0)
		if o.console != nil {
			if _, err := o.console.Write(p[:n]); err != nil {
				return err
			}
			p = p[n:]
			continue
		}
		for n < len(p) {
			next := lineEnd(p, n)
			if next > atomicWrite {
				break
			}
			n = next
		}
		if _, err := o.w.Write(p[:n]); err != nil {
			return err
		}
		p = p[n:]
	}
	return nil
}

// lineEnd is the end of the line of p starting at from (past its newline),
// or len(p).
func lineEnd(p []byte, from int) int {
	if i := bytes.IndexByte(p[from:], '\n'); i >= 0 {
		return from + i + 1
	}
	return len(p)
}

// ConfigureGlobals sets zerolog's process-wide field names. It is called
// once, from main only (the message key "msg" matches slog's, so routed
// protoactor records do not carry two message keys).
func ConfigureGlobals() {
	zerolog.MessageFieldName = "msg"
	zerolog.TimeFieldFormat = "2006-01-02T15:04:05.000Z07:00"
}

// ActorSystemOption routes protoactor's slog output into l, tagged with
// component=protoactor. protoactor logs a lot at info; its records are kept
// at warn and above unless l is at debug. Its records about remote
// connections coming and going (every client verb opens and closes one)
// are logged at debug (ProtoactorHandler).
func ActorSystemOption(l zerolog.Logger) actor.ConfigOption {
	return actor.WithLoggerFactory(func(sys *actor.ActorSystem) *slog.Logger {
		return slog.New(ProtoactorHandler(l))
	})
}

// ProtoactorHandler is the slog handler ActorSystemOption gives
// protoactor: records into l (component=protoactor, warn and above unless
// l is at debug), connection churn lowered to debug (see churn).
func ProtoactorHandler(l zerolog.Logger) slog.Handler {
	pl := l.With().Str("component", "protoactor").Logger()
	if l.GetLevel() > zerolog.DebugLevel {
		pl = pl.Level(zerolog.WarnLevel)
	}
	return churnHandler{zerolog.NewSlogHandler(pl)}
}

// churnHandler lowers protoactor's records about a remote connection
// ending to debug: a client verb connects, gets its reply and exits, and
// protoactor's remote then logs "EndpointWriter lost connection ... EOF" at
// error level on the other side. What such a loss means (a supervisor's
// session lost, a client gone) is logged by our own actors; other
// protoactor errors keep their level.
type churnHandler struct{ next slog.Handler }

func (h churnHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h churnHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level > slog.LevelDebug && churn(r) {
		if !h.next.Enabled(ctx, slog.LevelDebug) {
			return nil
		}
		r.Level = slog.LevelDebug
	}
	return h.next.Handle(ctx, r)
}

func (h churnHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return churnHandler{h.next.WithAttrs(as)}
}

func (h churnHandler) WithGroup(name string) slog.Handler {
	return churnHandler{h.next.WithGroup(name)}
}

// churn says whether a protoactor record is a remote connection ending in
// the ordinary way (messages of protoactor-go's remote package, checked
// against a gateway serving client verbs).
func churn(r slog.Record) bool {
	switch r.Message {
	case "EndpointWriter lost connection":
		// The peer closed or reset the stream (gRPC Unavailable or
		// Canceled); another cause is still reported as it came.
		e := recordError(r)
		for _, s := range []string{"code = Unavailable", "code = Canceled", "EOF", "connection reset"} {
			if strings.Contains(e, s) {
				return true
			}
		}
		return false
	case "EndpointWriter error when closing the stream", "EndpointWriter error when closing the client conn",
		"EndpointReader failed to send disconnection message", "EndpointReader failed to read", "EndpointReader is closing",
		"EndpointWatcher handling terminated", "EndpointWriter closing client connection":
		return true
	}
	return false
}

// recordError is the text of a record's "error" attribute ("" without).
func recordError(r slog.Record) string {
	var e string
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "error" {
			e = fmt.Sprint(a.Value.Any())
			return false
		}
		return true
	})
	return e
}
