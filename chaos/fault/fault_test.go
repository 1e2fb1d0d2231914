package fault

import (
	"errors"
	"testing"
)

func TestParseRule(t *testing.T) {
	p, r, err := ParseRule("identity.lookup=panic:3")
	if err != nil || p != IdentityLookup || r.Kind != KindPanic || r.Count != 3 {
		t.Fatalf("got %v %+v %v", p, r, err)
	}
	for _, bad := range []string{"", "x", "=error", "a=boom", "a=error:-1", "a=error:x"} {
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
	if s.Fired(DNSQuery) != 2 || s.Fired(IdentityLookup) != 1 {
		t.Fatalf("fired counts %d %d", s.Fired(DNSQuery), s.Fired(IdentityLookup))
	}
}
