package fault

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

func TestParseRule(t *testing.T) {
	p, r, err := ParseRule("identity.lookup=panic:3")
	if err != nil || p != IdentityLookup || r.Kind != KindPanic || r.Count != 3 {
		t.Fatalf("got %v %+v %v", p, r, err)
	}
	p, r, err = ParseRule("dns.upstream=delay/2s:1@4")
	if err != nil || p != DNSUpstream || r.Kind != KindDelay || r.Delay != 2e9 || r.Count != 1 || r.Skip != 4 {
		t.Fatalf("got %v %+v %v", p, r, err)
	}
	if _, r, err = ParseRule("store.committed=kill"); err != nil || r.Kind != KindKill {
		t.Fatalf("kill: %+v %v", r, err)
	}
	for _, bad := range []string{"", "x", "=error", "a=boom", "a=error:-1", "a=error:x",
		"a=delay", "a=delay/", "a=delay/-1s", "a=error/1s", "a=error@x", "a=error:1@-2"} {
		if _, _, err := ParseRule(bad); err == nil {
			t.Errorf("ParseRule(%q) accepted", bad)
		}
	}
}

func TestSetCountsAndDisarms(t *testing.T) {
	s := NewSet()
	if err := s.Inject(DNSQuery); err != nil {
		t.Fatalf("unarmed point fired: %v", err)
	}
	s.Arm(DNSQuery, Rule{Kind: KindError, Count: 2})
	for i := 0; i < 2; i++ {
		if err := s.Inject(DNSQuery); !errors.Is(err, ErrInjected) {
			t.Fatalf("try %d: %v", i, err)
		}
	}
	if err := s.Inject(DNSQuery); err != nil {
		t.Fatalf("fired past its count: %v", err)
	}
	s.Arm(IdentityLookup, Rule{Kind: KindPanic})
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("KindPanic did not panic")
			}
		}()
		_ = s.Inject(IdentityLookup)
	}()
	s.Disarm(IdentityLookup)
	if err := s.Inject(IdentityLookup); err != nil {
		t.Fatal(err)
	}
	s.Arm(PolicyDecide, Rule{Kind: KindError, Count: 1, Skip: 2})
	for i, want := range []bool{false, false, true, false} {
		if err := s.Inject(PolicyDecide); (err != nil) != want {
			t.Fatalf("skip rule, call %d: %v", i, err)
		}
	}
	if s.Fired(DNSQuery) != 2 || s.Fired(IdentityLookup) != 1 {
		t.Fatalf("fired counts %d %d", s.Fired(DNSQuery), s.Fired(IdentityLookup))
	}
}

// TestKillKillsTheProcess runs itself as a child that arms kill after two
// skipped calls: the third call must end the child by SIGKILL.
func TestKillKillsTheProcess(t *testing.T) {
	if os.Getenv("FAULT_TEST_KILL_CHILD") == "1" {
		s := NewSet()
		s.Arm(StoreCommitted, Rule{Kind: KindKill, Skip: 2})
		for i := 0; i < 3; i++ {
			_ = s.Inject(StoreCommitted)
			fmt.Printf("survived %d\n", i)
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillKillsTheProcess$")
	cmd.Env = append(os.Environ(), "FAULT_TEST_KILL_CHILD=1")
	out, err := cmd.Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("child did not die: %v, output %q", err, out)
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want SIGKILL", ee)
	}
	if got := string(out); got != "survived 0\nsurvived 1\n" {
		t.Fatalf("child output %q", got)
	}
}

// TestApply: a rule string arms, off disarms, and the fired count before
// the call comes back; a bad rule changes nothing.
func TestApply(t *testing.T) {
	s := NewSet()
	if _, err := s.Apply("dns.query=error:2"); err != nil {
		t.Fatal(err)
	}
	_ = s.Inject(DNSQuery)
	if fired, err := s.Apply("dns.query=off"); err != nil || fired != 1 {
		t.Fatalf("off: fired %d, %v", fired, err)
	}
	if err := s.Inject(DNSQuery); err != nil {
		t.Fatalf("disarmed point fired: %v", err)
	}
	if _, err := s.Apply("dns.query=boom"); err == nil {
		t.Fatal("bad rule accepted")
	}
}
