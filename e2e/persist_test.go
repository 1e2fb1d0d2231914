package e2e

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/internal/testenv"
)

// TestFailedWriteThenRetry: persist, then apply. With one store write
// failing, delete and policy set answer an error naming the cause and
// change nothing (the sandbox stays Ready with its supervisor and policy
// version); each works when retried: the sandbox is gone, its supervisor
// too, its workspace removed.
func TestFailedWriteThenRetry(t *testing.T) {
	w := newWorld(t, 0, "--chaos")
	s := w.create("brittle", `echo keep > /sandbox/keep; exec sleep 1000`)
	w.file(s, "keep")
	arm := func() {
		t.Helper()
		if _, errOut, code := w.cli("fault", "--gateway", "store.write=error:1"); code != 0 {
			t.Fatalf("arm store.write: %d %s", code, errOut)
		}
	}
	arm()
	out, errOut, code := w.policyCLI("set", "brittle", w.policy)
	if code == 0 || !strings.Contains(errOut, "save state") || !strings.Contains(errOut, "retry") {
		t.Fatalf("policy set with a failing write: exit %d %s %s", code, out, errOut)
	}
	if out, _, _ := w.policyCLI("get", "brittle"); !strings.Contains(out, "version 1") {
		t.Fatalf("policy version after the failed set: %s", out)
	}
	arm()
	_, errOut, code = w.cli("delete", "brittle")
	if code != 5 || !strings.Contains(errOut, "save state") || !strings.Contains(errOut, "nothing changed; retry") { // Unavailable: retry
		t.Fatalf("delete with a failing write: exit %d %s", code, errOut)
	}
	if r, code := w.get("brittle"); code != 0 || r.Phase != "Ready" || r.SupervisorPid != s.SupervisorPid {
		t.Fatalf("after the failed delete: exit %d %+v", code, r)
	}
	if _, errOut, code := w.cli("delete", "brittle"); code != 0 {
		t.Fatalf("delete, retried: exit %d %s", code, errOut)
	}
	testenv.Eventually(t, 15*time.Second, func() bool { _, code := w.get("brittle"); return code == 3 }, "the sandbox to be gone")
	if err := syscall.Kill(s.SupervisorPid, 0); err == nil {
		t.Fatalf("the supervisor %d outlived the delete", s.SupervisorPid)
	}
	if _, err := os.Stat(s.Workspace); !os.IsNotExist(err) {
		t.Fatalf("workspace %s after delete: %v", s.Workspace, err)
	}
}
