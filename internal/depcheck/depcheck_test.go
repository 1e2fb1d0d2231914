package depcheck

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/stockade-dev/stockade/"

// forbidden maps a light package to import paths (prefixes) it must not
// pull in, directly or transitively.
var forbidden = map[string][]string{
	"policy/reason":            {"github.com/open-policy-agent/", "github.com/asynkron/"},
	"chaos/fault":              {"github.com/open-policy-agent/", "github.com/asynkron/"},
	"audit":                    {"github.com/open-policy-agent/", "github.com/asynkron/"},
	"boundary/proxy":           {"github.com/open-policy-agent/", "github.com/asynkron/"},
	"boundary/dnsproxy":        {"github.com/open-policy-agent/", "github.com/asynkron/"},
	"boundary/identity":        {"github.com/open-policy-agent/", "github.com/asynkron/"},
	"actors/supervise":         {"github.com/open-policy-agent/"},
	"internal/logx":            {"github.com/open-policy-agent/"},
	"actors/sandbox/lifecycle": {"github.com/open-policy-agent/", "github.com/asynkron/", "go.etcd.io/"},
	"store":                    {"github.com/open-policy-agent/", "github.com/asynkron/"},
	"driver/process":           {"github.com/open-policy-agent/", "github.com/asynkron/"},
}

func TestLightPackagesStayLight(t *testing.T) {
	for pkg, bad := range forbidden {
		out, err := exec.Command("go", "list", "-deps", module+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, b := range bad {
				if strings.HasPrefix(dep, b) {
					t.Errorf("%s depends on %s (forbidden prefix %s)", pkg, dep, b)
				}
			}
		}
	}
}
