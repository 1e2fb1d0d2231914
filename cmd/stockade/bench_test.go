package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// BenchmarkSandboxListCLI: the wall time of one `stockade sandbox list`
// process (start, configuration, mTLS handshake check, its own endpoint,
// the request, the answer over the gateway's dial-back, exit) against a
// real gateway on 127.0.0.1. The in-process part is compared with plain
// protoactor remote in client.BenchmarkCommandMTLSvsPlain.
func BenchmarkSandboxListCLI(b *testing.B) {
	state := filepath.Join(b.TempDir(), "state")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	gw := exec.Command(binPath, "gateway", "run", "--state-dir", state, "--listen", addr, "--relay-listen", "127.0.0.1:0", "--log-level", "warn")
	if err := gw.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = gw.Process.Kill(); _ = gw.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(state, "client.config")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("gateway not ready in 20 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	list := func() time.Duration {
		t0 := time.Now()
		if out, err := exec.Command(binPath, "sandbox", "list", "--state-dir", state, "--gateway", addr).CombinedOutput(); err != nil {
			b.Fatalf("sandbox list: %v\n%s", err, out)
		}
		return time.Since(t0)
	}
	list() // the page cache holds the binary
	var ds []time.Duration
	b.ResetTimer()
	for range b.N {
		ds = append(ds, list())
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(ds[len(ds)*99/100].Nanoseconds()), "p99-ns")
}
