package identity

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// sockPool holds extra loopback TCP connections (two sockets each) to fill
// the host's TCP tables.
type sockPool struct {
	ln    net.Listener
	conns []net.Conn
}

func (p *sockPool) close() {
	for _, c := range p.conns {
		c.Close()
	}
	p.ln.Close()
}

// grow adds connections until the pool holds n sockets.
func (p *sockPool) grow(b *testing.B, n int) {
	b.Helper()
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		b.Fatal(err)
	}
	if need := uint64(n + 256); lim.Cur < need {
		if lim.Max < need {
			b.Skipf("RLIMIT_NOFILE hard limit %d < %d fds needed", lim.Max, need)
		}
		lim.Cur = lim.Max
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
			b.Fatalf("raise RLIMIT_NOFILE: %v", err)
		}
	}
	for len(p.conns) < n {
		c, err := net.Dial("tcp4", p.ln.Addr().String())
		if err != nil {
			b.Fatalf("dial %d: %v", len(p.conns), err)
		}
		s, err := p.ln.Accept()
		if err != nil {
			c.Close()
			b.Fatalf("accept %d: %v", len(p.conns), err)
		}
		p.conns = append(p.conns, c, s)
	}
}

// hostTCPSockets reads the kernel's count of TCP sockets in use
// (/proc/net/sockstat, a counter, not a table walk).
func hostTCPSockets() float64 {
	b, err := os.ReadFile("/proc/net/sockstat")
	if err != nil {
		return -1
	}
	for line := range bytes.Lines(b) {
		f := bytes.Fields(line)
		if len(f) >= 3 && string(f[0]) == "TCP:" {
			n, _ := strconv.Atoi(string(f[2]))
			return float64(n)
		}
	}
	return -1
}

// timed runs op b.N times and reports p50/p99 latency next to ns/op.
func timed(b *testing.B, op func() error) {
	b.Helper()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		err := op()
		lat = append(lat, time.Since(t0))
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Nanoseconds()) }
	b.ReportMetric(pct(0.50), "p50-ns")
	b.ReportMetric(pct(0.99), "p99-ns")
}

// BenchmarkSocketStep measures the exact sock_diag request (4-tuple ->
// inode) with 200, 2,000 and 18,000 extra host sockets, and for contrast a
// full read of /proc/net/tcp at the same counts.
func BenchmarkSocketStep(b *testing.B) {
	r := newResolver(b)
	conn := pair(b, listen(b, "tcp4", "127.0.0.1:0"))
	local, remote := ends(conn)
	pool := &sockPool{ln: listen(b, "tcp4", "127.0.0.1:0")}
	defer pool.close()
	for _, n := range []int{200, 2000, 18000} {
		pool.grow(b, n)
		b.Run(fmt.Sprintf("sockets=%d/sock_diag", n), func(b *testing.B) {
			timed(b, func() error {
				d, err := r.diag.lookup(remote, local)
				if err == nil && d.inode == 0 {
					err = fmt.Errorf("no inode")
				}
				return err
			})
			b.ReportMetric(hostTCPSockets(), "host-tcp")
		})
		b.Run(fmt.Sprintf("sockets=%d/proc_net_tcp", n), func(b *testing.B) {
			timed(b, func() error {
				_, err := os.ReadFile("/proc/net/tcp")
				return err
			})
		})
	}
}

// BenchmarkWholeLookup resolves the leaf of a chain of 50 nested processes
// to its exe and 50+ ancestors: warm (inode cache hit, validated) and cold
// (cache dropped each time: /proc listing, newest-first fd scan).
func BenchmarkWholeLookup(b *testing.B) {
	ln := listen(b, "tcp4", "127.0.0.1:0")
	conn, leaf := chain(b, ln, 50)
	local, remote := ends(conn)
	r := newResolver(b)
	for _, cold := range []bool{false, true} {
		name := "chain=50/warm"
		if cold {
			name = "chain=50/cold"
		}
		b.Run(name, func(b *testing.B) {
			var id Identity
			timed(b, func() error {
				if cold {
					r.cache.reset()
					r.proc.t.reset()
				}
				var err error
				id, err = r.Resolve(context.Background(), local, remote)
				if err == nil && id.Pid != leaf {
					err = fmt.Errorf("pid %d, want %d", id.Pid, leaf)
				}
				return err
			})
			b.ReportMetric(float64(len(id.Ancestors)), "ancestors")
		})
	}
}

// BenchmarkBoundIdentity measures what a sandbox's boundary asks per
// connection of a warm client (bounded candidates: this process): the
// lookup alone, then with the recheck at the request's end, then with the
// tamper check too (the mappings' verdict kept for the client's exec; its
// tracer read with them, or at every call as where the workload may
// ptrace).
func BenchmarkBoundIdentity(b *testing.B) {
	conn := pair(b, listen(b, "tcp4", "127.0.0.1:0"))
	local, remote := ends(conn)
	self := os.Getpid()
	for _, tc := range []struct {
		name                       string
		recheck, tamper, everyCall bool
	}{
		{"lookup", false, false, false},
		{"lookup+recheck", true, false, false},
		{"lookup+recheck+tampered", true, true, false},
		{"lookup+recheck+tampered/tracer-every-call", true, true, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			opts := []Option{WithPids(func() ([]int, error) { return []int{self}, nil })}
			if tc.tamper {
				opts = append(opts, WithTamperCheck(TamperPolicy{ReadOnly: hostReadOnly(), TracerEveryCall: tc.everyCall}))
			}
			r := newResolver(b, opts...)
			ctx := context.Background()
			// A fork the resolver's events show gives it the pid cursor
			// (else each lookup reads /proc/loadavg, whether the host
			// forked during the run or not).
			if err := exec.Command(lookPath(b, "true")).Run(); err != nil {
				b.Fatal(err)
			}
			if _, err := r.Resolve(ctx, local, remote); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			timed(b, func() error {
				id, err := r.Resolve(ctx, local, remote)
				if err == nil && tc.recheck {
					err = r.Recheck(ctx, id)
				}
				if err == nil && tc.tamper {
					var t *Tampering
					if t, err = r.Tampered(id); t != nil {
						err = fmt.Errorf("tampered: %s", t.Why)
					}
				}
				return err
			})
		})
	}
}

// BenchmarkTamperedFirstCall measures a client's first tamper check (what
// each new process, or each exec, pays once): its maps read and judged,
// for curl (a program of some 50 libraries, waiting on its stdin) and
// this test binary.
func BenchmarkTamperedFirstCall(b *testing.B) {
	curl := exec.Command(lookPath(b, "curl"), "-s", "-o", "/dev/null", "file:///dev/stdin")
	stdin, err := curl.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := curl.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); _ = curl.Wait() })
	r := newResolver(b, WithTamperCheck(TamperPolicy{ReadOnly: hostReadOnly()}))
	for _, tc := range []struct {
		name string
		pid  int
	}{{"curl", curl.Process.Pid}, {"self", os.Getpid()}} {
		b.Run(tc.name, func(b *testing.B) {
			id := Identity{Pid: tc.pid}
			read := func() error {
				return r.proc.withHandle(tc.pid, func(h *procHandle) (err error) {
					id.Exe, id.Start, id.Exec, err = r.proc.describe(h)
					return err
				})
			}
			if err := read(); err != nil {
				b.Fatal(err)
			}
			timed(b, func() error {
				r.proc.t.forget(tc.pid, false) // as an exec's event does
				if err := read(); err != nil {
					return err
				}
				t, err := r.Tampered(id)
				if t != nil {
					err = fmt.Errorf("tampered: %s", t.Why)
				}
				return err
			})
		})
	}
}
