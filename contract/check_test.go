package contract

import "testing"

func TestNames(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sandbox bool // CheckName accepts it
		host    bool // CheckHostName accepts it
	}{
		{"demo-1", true, true},
		{"a", true, true},
		{"", false, false},
		{"..", false, false},
		{".", false, false},
		{"../x", false, false},
		{"a/b", false, false},
		{"-a", false, false},
		{"a-", false, false},
		{"A", false, true},
		{"a\x1b", false, false},
		{"a b", false, false},
		{"build_host.example.com", false, true},
		{"a..b", false, false},
		{"x.", false, false},
		{string(make([]byte, 64)), false, false},
	} {
		if got := CheckName(tc.name) == nil; got != tc.sandbox {
			t.Errorf("CheckName(%q) ok = %v, want %v", tc.name, got, tc.sandbox)
		}
		if got := CheckHostName("host", tc.name) == nil; got != tc.host {
			t.Errorf("CheckHostName(%q) ok = %v, want %v", tc.name, got, tc.host)
		}
	}
	for uid, ok := range map[string]bool{"0123456789abcdef": true, "": false, "../x": false, "ABC": false, "a1": true} {
		if got := CheckUID(uid) == nil; got != ok {
			t.Errorf("CheckUID(%q) ok = %v, want %v", uid, got, ok)
		}
	}
}
