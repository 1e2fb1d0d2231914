package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/actors/boundary"
	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/internal/testenv"
)

// floodScript asks the sandbox's resolver (resolv.conf's nameserver, port
// 53) for n names in no policy, one after another, and prints how many
// came back REFUSED with their query's id.
const floodScript = `
use IO::Socket::INET;
open my $f, '<', '/etc/resolv.conf' or die "resolv.conf: $!";
my ($ns) = map { /^nameserver\s+(\S+)/ ? $1 : () } <$f>;
my $s = IO::Socket::INET->new(PeerAddr => "$ns:53", Proto => 'udp') or die "socket: $!";
my $refused = 0;
for my $i (0 .. $ARGV[0] - 1) {
	my $name = "flood-$i";
	$s->send(pack('n6', $i, 0x0100, 1, 0, 0, 0) . chr(length $name) . $name . "\x04test\x00" . pack('n2', 1, 1)) or die "send: $!";
	my $rin = ''; vec($rin, fileno($s), 1) = 1;
	select(my $rout = $rin, undef, undef, 5) or die "no answer to query $i";
	my $r; $s->recv($r, 512);
	my ($id, $flags) = unpack('n2', $r);
	$refused++ if $id == $i && ($flags & 0xf) == 5;
}
print "$refused\n";
`

// TestWorkloadDenialFloodCannotGrowTheSupervisorLog plays a workload that
// asks for thousands of names it may not resolve: each is refused and
// audited, and the supervisor's log, which nothing rotates, keeps at most
// boundary.LogDenialsPerMinute of them a minute (before the limit, a line
// per denial: a workload could fill the gateway's disk through it).
func TestWorkloadDenialFloodCannotGrowTheSupervisorLog(t *testing.T) {
	const flood = 2000
	w := newWorld(t, 0)
	w.create("flood", `exec sleep 1000`)
	if err := os.WriteFile(filepath.Join(testenv.Path(t)(contract.StateDir(w.state).Workspace("flood")), "flood.pl"), []byte(floodScript), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := w.execIn("flood", "perl /sandbox/flood.pl "+strconv.Itoa(flood))
	if code != 0 || strings.TrimSpace(out) != strconv.Itoa(flood) {
		t.Fatalf("flood: exit %d, %q refused of %d; stderr %s", code, out, flood, errOut)
	}
	b, err := os.ReadFile(sandboxLog(w.state, "flood", contract.SupervisorLog))
	if err != nil {
		t.Fatal(err)
	}
	lines := 0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "DNS:QUERY") && strings.Contains(l, "DENIED") && strings.Contains(l, "flood-") {
			lines++
		}
	}
	// One minute's lines, two if the flood ran across a window's end.
	if lines < 1 || lines > 2*boundary.LogDenialsPerMinute {
		t.Fatalf("supervisor.log has %d denial lines for %d refused names, want 1..%d", lines, flood, 2*boundary.LogDenialsPerMinute)
	}
	a, err := os.ReadFile(sandboxLog(w.state, "flood", contract.AuditLog))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(a), `"hostname":"flood-`); n != flood {
		t.Fatalf("audit.jsonl has %d of the %d refused names", n, flood)
	}
	if s, _ := w.get("flood"); s.Phase != "Ready" {
		t.Fatalf("sandbox left Ready: %+v", s)
	}
	t.Logf("%d refused names: %d supervisor.log lines (%d bytes), all %d in the audit file", flood, lines, len(b), flood)
}
