package supervisor

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/nsrun"
)

// TestStartSandboxStopSignal: a stop signal during the sandbox's start
// cancels the start and is returned; one that arrives as the start
// succeeds is put back for the supervisor's wait; none changes nothing.
func TestStartSandboxStopSignal(t *testing.T) {
	t.Run("during the start", func(t *testing.T) {
		sig := make(chan os.Signal, 2)
		began := make(chan struct{})
		go func() { <-began; sig <- syscall.SIGTERM }()
		start := time.Now()
		sb, stopped, err := startSandbox(context.Background(), func(ctx context.Context) (*nsrun.Sandbox, error) {
			close(began)
			<-ctx.Done() // a start that would take its whole 30 s
			return nil, ctx.Err()
		}, sig)
		if sb != nil || stopped != syscall.SIGTERM || !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, %v, %v; want no sandbox, SIGTERM, context.Canceled", sb, stopped, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("the cancelled start took %s", d)
		}
		if len(sig) != 0 {
			t.Fatalf("the signal was both returned and put back")
		}
	})
	t.Run("as the start succeeds", func(t *testing.T) {
		sig := make(chan os.Signal, 2)
		want := &nsrun.Sandbox{}
		sb, stopped, err := startSandbox(context.Background(), func(ctx context.Context) (*nsrun.Sandbox, error) {
			sig <- syscall.SIGINT
			<-ctx.Done() // the watcher took the signal and cancelled
			return want, nil
		}, sig)
		if sb != want || stopped != nil || err != nil {
			t.Fatalf("got %v, %v, %v; want the sandbox, no stop, no error", sb, stopped, err)
		}
		select {
		case s := <-sig:
			if s != syscall.SIGINT {
				t.Fatalf("put back %v, want SIGINT", s)
			}
		default:
			t.Fatal("the signal that came during a successful start is lost: the supervisor would not stop")
		}
	})
	t.Run("no signal", func(t *testing.T) {
		sig := make(chan os.Signal, 2)
		boom := errors.New("boom")
		sb, stopped, err := startSandbox(context.Background(), func(ctx context.Context) (*nsrun.Sandbox, error) {
			if _, ok := ctx.Deadline(); !ok {
				t.Error("the start is not bounded")
			}
			return nil, boom
		}, sig)
		if sb != nil || stopped != nil || !errors.Is(err, boom) {
			t.Fatalf("got %v, %v, %v; want the start's own error", sb, stopped, err)
		}
	})
}
