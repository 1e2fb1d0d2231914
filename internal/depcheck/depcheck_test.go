package depcheck

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/stockade-dev/stockade/"

const (
	opa      = "github.com/open-policy-agent/"
	protoact = "github.com/asynkron/"
	etcd     = "go.etcd.io/"
	bpf      = "github.com/cilium/ebpf"
)

// ban is one rule: pkg must not pull in (directly or transitively) any
// import path starting with one of prefixes, for the reason given.
type ban struct {
	pkg      string
	prefixes []string
	why      string
}

func bans() []ban {
	return []ban{
		{"policy/reason", []string{opa, protoact}, "reasons are shared by the CLI and audit: no policy engine, no actors"},
		{"chaos/fault", []string{opa, protoact}, "every layer injects faults: the seam must cost nothing"},
		{"audit", []string{opa, protoact}, "the audit writer runs in the boundary's hot path"},
		{"boundary/proxy", []string{opa, protoact}, "the proxy asks policy through an interface; OPA lives in policy only"},
		{"boundary/dnsproxy", []string{opa, protoact}, "the DNS proxy asks policy through an interface"},
		{"boundary/identity", []string{opa, protoact, bpf}, "identity is procfs and netlink; kernel connect records come in through the ConnectRecords seam (BPF lives in boundary/identity/connmap, so the resolver's logic is tested with fakes)"},
		{"actors/boundary", []string{bpf}, "the boundary actors take a resolver; only boundary serve's wiring attaches the BPF program"},
		{"actors/supervise", []string{opa}, "supervision decides no policy"},
		{"internal/logx", []string{opa}, "logging decides no policy"},
		{"actors/sandbox/lifecycle", []string{opa, protoact, etcd}, "the lifecycle machine is pure logic, tested without actors or stores"},
		{"store", []string{opa, protoact}, "records are data; the actor uses them through its Store seam"},
		{"driver", []string{opa, protoact, module + "driver/process"}, "the driver seam is an interface; implementations plug in below it"},
		{"driver/process", []string{opa, protoact}, "starting a process needs no actors or policy"},
		{"contract", []string{module, "github.com/", "golang.org/", "google.golang.org/", "gopkg.in/", etcd}, "contracts are read by every process: standard library only"},
		{"errdefs", []string{opa, etcd}, "the error vocabulary is shared by the gateway, the client and the CLI (messages, for the wire status, brings protoactor)"},
		{"actors/gateway", []string{module + "client"}, "the gateway serves clients; it must not depend on their package (shared formats live in trust and contract)"},
		{"actors/sandbox", []string{module + "driver/process", module + "client"}, "the sandbox actor reaches processes only through the driver.Driver seam (so a fake and a cluster's remote driver fit)"},
		{"actors/sandbox", []string{module + "cluster", "go.etcd.io/etcd/"}, "the sandbox actors see the cluster only through their Cluster and Store seams (tested in process without etcd); the gateway adapts package cluster"},
		{"cluster", []string{opa, protoact}, "membership and fencing are etcd and data: no actors, no policy engine"},
		{"internal/linelimit", []string{opa, protoact, etcd, bpf, "github.com/rs/", "golang.org/", "google.golang.org/", module + "logs", module + "sandbox", module + "supervisor"},
			"every sandbox's init (pid 1) cuts and limits the workload's output with it: the standard library and internal/clock only"},
		{"sandbox/nsrun", []string{opa, protoact, etcd, bpf, module + "supervisor", module + "logs", module + "audit", module + "policy"},
			"the namespace runtime is every sandbox's init: mechanics only, no actors, policy or log formats"},
	}
}

func TestLightPackagesStayLight(t *testing.T) {
	for _, b := range bans() {
		out, err := exec.Command("go", "list", "-deps", module+b.pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", b.pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if dep == module+b.pkg {
				continue
			}
			for _, p := range b.prefixes {
				if strings.HasPrefix(dep, p) {
					t.Errorf("%s depends on %s (banned: %s)", b.pkg, dep, b.why)
				}
			}
		}
	}
}
