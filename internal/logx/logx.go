// Package logx owns how stockade's processes build their loggers: zerolog
// for our code and protoactor's slog routed into the same zerolog output, so
// one process writes one log stream with one format.
package logx

import (
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
	lvl, err := zerolog.ParseLevel(strings.ToLower(level))
	if err != nil || level == "" {
		lvl = zerolog.InfoLevel
	}
	if pretty {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: "15:04:05.000"}
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger()
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
// at warn and above unless l is at debug.
func ActorSystemOption(l zerolog.Logger) actor.ConfigOption {
	return actor.WithLoggerFactory(func(sys *actor.ActorSystem) *slog.Logger {
		pl := l.With().Str("component", "protoactor").Logger()
		if l.GetLevel() > zerolog.DebugLevel {
			pl = pl.Level(zerolog.WarnLevel)
		}
		return slog.New(zerolog.NewSlogHandler(pl))
	})
}
