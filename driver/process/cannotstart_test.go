package process

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/driver"
	"github.com/stockade-dev/stockade/sandbox/spec"
	"github.com/stockade-dev/stockade/store"
)

// TestExitCannotStart: a supervisor exiting with
// contract.ExitSupervisorCannotStart is reported as driver.ErrCannotStart
// with its last line (without the "stockade: " prefix) as the message;
// any other exit status is not.
func TestExitCannotStart(t *testing.T) {
	for _, tc := range []struct {
		code      int
		permanent bool
		want      string
	}{
		{contract.ExitSupervisorCannotStart, true, "the sandbox cannot start: the command /no/such/bin does not exist in the sandbox"},
		{1, false, "supervisor exited: exit status 1: the command /no/such/bin does not exist in the sandbox"},
	} {
		t.Run(strconv.Itoa(tc.code), func(t *testing.T) {
			state := t.TempDir()
			bin := filepath.Join(t.TempDir(), "fake-stockade")
			script := "#!/bin/sh\necho 'some log line'\necho 'stockade: the command /no/such/bin does not exist in the sandbox' >&2\nexit " + strconv.Itoa(tc.code) + "\n"
			if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			d := New(Config{StateDir: state, Binary: bin, Gateway: "127.0.0.1:1",
				Credentials: func(string) (spec.Credentials, error) { return spec.Credentials{CA: "ca", Cert: "c", Key: "k"}, nil }})
			p, err := d.Start(context.Background(), driver.Launch{Instance: "i1", Spec: store.Spec{Name: "s", UID: "a1", Argv: []string{"/no/such/bin"}}})
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-p.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("the fake supervisor did not exit")
			}
			err = p.Err()
			if errors.Is(err, driver.ErrCannotStart) != tc.permanent || err.Error() != tc.want {
				t.Fatalf("Err() = %q (ErrCannotStart %v), want %q (%v)", err, errors.Is(err, driver.ErrCannotStart), tc.want, tc.permanent)
			}
		})
	}
}
