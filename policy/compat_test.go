package policy

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCompatPoliciesLoad(t *testing.T) {
	files, err := filepath.Glob("testdata/compat/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no compat policies: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pol, err := Parse(filepath.Base(f), data)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		t.Logf("%s: %d policies, %d endpoints", filepath.Base(f), len(pol.NetworkPolicies), pol.EndpointCount())
		for _, n := range pol.Notices() {
			t.Log("  ", n)
		}
	}
}
