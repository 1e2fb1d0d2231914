package logx

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/rs/zerolog"
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

// writes counts the Write calls it gets and keeps what they wrote.
type writes struct {
	n int
	b bytes.Buffer
}

func (w *writes) Write(p []byte) (int, error) { w.n++; return w.b.Write(p) }

// WriteEvents hands a JSON destination several events in one write, and
// gives the console form the same text as one event per write would.
func TestWriteEvents(t *testing.T) {
	ConfigureGlobals()
	render := func(n int) []byte {
		var b bytes.Buffer
		l := zerolog.New(&b)
		for i := 0; i < n; i++ {
			l.Warn().Str("component", "audit").Int("i", i).Msg("DNS:QUERY [MED] DENIED")
		}
		return b.Bytes()
	}
	three := render(3)

	var raw writes
	if err := NewOut(&raw, false).WriteEvents(three); err != nil {
		t.Fatal(err)
	}
	if raw.n != 1 || !bytes.Equal(raw.b.Bytes(), three) {
		t.Fatalf("JSON destination: %d writes of %q, want 1 of %q", raw.n, raw.b.String(), three)
	}

	var batched, single writes
	if err := NewOut(&batched, true).WriteEvents(three); err != nil {
		t.Fatal(err)
	}
	per := NewOut(&single, true)
	for _, line := range bytes.SplitAfter(three, []byte("\n")) {
		if len(line) > 0 {
			if _, err := per.Write(line); err != nil {
				t.Fatal(err)
			}
		}
	}
	if batched.b.String() != single.b.String() || strings.Count(batched.b.String(), "DENIED") != 3 {
		t.Fatalf("console form of a batch:\n%s\nwant, as one event per write:\n%s", batched.b.String(), single.b.String())
	}
	if strings.Contains(batched.b.String(), "{") {
		t.Fatalf("console form left JSON in: %s", batched.b.String())
	}
}

// writeSizes records each write's bytes.
type writeSizes struct{ got [][]byte }

func (w *writeSizes) Write(p []byte) (int, error) {
	w.got = append(w.got, bytes.Clone(p))
	return len(p), nil
}

// A batch larger than a pipe's atomic write goes out in writes of whole
// lines of at most 4096 bytes (a longer line alone), in order, all of it.
func TestWriteEventsWholeLinesWithinPipeBuf(t *testing.T) {
	var batch []byte
	for i := 0; i < 100; i++ {
		batch = append(batch, fmt.Sprintf("{\"i\":%d,\"msg\":\"%s\"}\n", i, strings.Repeat("x", 180))...)
		if i == 50 {
			batch = append(batch, fmt.Sprintf("{\"long\":\"%s\"}\n", strings.Repeat("y", 5000))...)
		}
	}
	var w writeSizes
	if err := NewOut(&w, false).WriteEvents(batch); err != nil {
		t.Fatal(err)
	}
	if len(w.got) < 3 || len(w.got) > 10 {
		t.Fatalf("%d writes for %d bytes, want a few", len(w.got), len(batch))
	}
	var joined []byte
	for _, p := range w.got {
		if p[len(p)-1] != '\n' {
			t.Fatalf("a write ends inside a line: %q", p[max(0, len(p)-20):])
		}
		if len(p) > 4096 && bytes.Count(p, []byte("\n")) != 1 {
			t.Fatalf("a write of %d bytes holds %d lines: over 4096 only a single line may go alone", len(p), bytes.Count(p, []byte("\n")))
		}
		joined = append(joined, p...)
	}
	if !bytes.Equal(joined, batch) {
		t.Fatal("the writes do not add up to the batch, in order")
	}
}
