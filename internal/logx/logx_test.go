package logx

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// line is one JSON log line.
type line struct {
	Level     string `json:"level"`
	Msg       string `json:"msg"`
	Component string `json:"component"`
	Error     string `json:"error"`
}

func logged(t *testing.T, b *bytes.Buffer) []line {
	t.Helper()
	var out []line
	for _, s := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if s == "" {
			continue
		}
		var l line
		if err := json.Unmarshal([]byte(s), &l); err != nil {
			t.Fatalf("log line %q: %v", s, err)
		}
		out = append(out, l)
	}
	return out
}

// The records protoactor's remote writes when a client verb's connection
// ends are debug; real errors keep their level; info stays hidden unless
// the logger is at debug.
func TestProtoactorChurnIsDebug(t *testing.T) {
	ConfigureGlobals()
	eof := errors.New("rpc error: code = Unavailable desc = error reading from server: EOF")
	emit := func(pl *slog.Logger) {
		pl.Error("EndpointWriter lost connection", slog.String("address", "127.0.0.1:39683"), slog.Any("error", eof))
		pl.Error("EndpointWriter lost connection", slog.String("address", "127.0.0.1:1"),
			slog.Any("error", errors.New("rpc error: code = Internal desc = stream terminated by RST_STREAM")))
		pl.Error("EndpointWriter failed to serialize message", slog.Any("error", errors.New("proto: bad")))
		pl.Error("EndpointWriter error when closing the client conn", slog.Any("error", errors.New("already closed")))
		pl.Info("EndpointWatcher handling terminated", slog.String("address", "127.0.0.1:39683"))
		pl.Warn("EndpointReader received unknown message type")
	}
	t.Run("info", func(t *testing.T) {
		var b bytes.Buffer
		emit(slog.New(ProtoactorHandler(New(&b, "info", false))))
		got := logged(t, &b)
		want := []line{
			{Level: "error", Msg: "EndpointWriter lost connection", Component: "protoactor", Error: "rpc error: code = Internal desc = stream terminated by RST_STREAM"},
			{Level: "error", Msg: "EndpointWriter failed to serialize message", Component: "protoactor", Error: "proto: bad"},
			{Level: "warn", Msg: "EndpointReader received unknown message type", Component: "protoactor"},
		}
		if len(got) != len(want) {
			t.Fatalf("got %d lines, want %d:\n%s", len(got), len(want), b.String())
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("line %d: got %+v, want %+v", i, got[i], want[i])
			}
		}
	})
	t.Run("debug", func(t *testing.T) {
		var b bytes.Buffer
		emit(slog.New(ProtoactorHandler(New(&b, "debug", false))))
		levels := map[string]string{}
		for _, l := range logged(t, &b) {
			levels[l.Msg+"|"+l.Error] = l.Level
		}
		for k, want := range map[string]string{
			"EndpointWriter lost connection|" + eof.Error():                                                    "debug",
			"EndpointWriter lost connection|rpc error: code = Internal desc = stream terminated by RST_STREAM": "error",
			"EndpointWriter failed to serialize message|proto: bad":                                            "error",
			"EndpointWriter error when closing the client conn|already closed":                                 "debug",
			"EndpointWatcher handling terminated|":                                                             "debug",
			"EndpointReader received unknown message type|":                                                    "warn",
		} {
			if levels[k] != want {
				t.Errorf("%s: level %q, want %q (all: %v)", k, levels[k], want, levels)
			}
		}
	})
	t.Run("attrs and groups keep the mapping", func(t *testing.T) {
		var b bytes.Buffer
		pl := slog.New(ProtoactorHandler(New(&b, "info", false))).With(slog.String("system", "x")).WithGroup("g")
		pl.Error("EndpointWriter lost connection", slog.Any("error", eof))
		if b.Len() != 0 {
			t.Errorf("churn logged at info through With/WithGroup: %s", b.String())
		}
	})
}
