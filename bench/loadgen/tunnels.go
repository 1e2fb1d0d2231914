package loadgen

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"
)

// TunnelConfig is one tunnels load.
type TunnelConfig struct {
	Target      Target
	Concurrency int           // workers, >= 1
	Duration    time.Duration // no tunnel starts after it
	Payload     int           // bytes echoed per tunnel; default 64
	IOTimeout   time.Duration // bound on one tunnel; default 5s
}

// TunnelResult is what a tunnels load measured. Latencies are of
// successful tunnels, from dial to close.
type TunnelResult struct {
	Mode        string           `json:"mode"`
	Concurrency int              `json:"concurrency"`
	Tunnels     int64            `json:"tunnels"`
	Errors      int64            `json:"errors"`
	ErrorKinds  map[string]int64 `json:"errorKinds,omitempty"`
	FirstError  string           `json:"firstError,omitempty"`
	ElapsedNs   int64            `json:"elapsedNs"`
	PerSecond   float64          `json:"perSecond"`
	P50Ns       int64            `json:"p50Ns"`
	P99Ns       int64            `json:"p99Ns"`
	// CPUNs is the load generator's own CPU time (user and system) over
	// the run: inside a sandbox it shares the machine with the boundary.
	CPUNs int64 `json:"cpuNs"`
}

type tunnelWorker struct {
	lat      []int64
	errs     map[string]int64
	firstErr error
}

// Tunnels runs cfg until its duration has passed or ctx is done. It fails
// only on a bad config; tunnel failures are counted in the result.
func Tunnels(ctx context.Context, cfg TunnelConfig) (TunnelResult, error) {
	if cfg.Concurrency < 1 || cfg.Duration <= 0 {
		return TunnelResult{}, fmt.Errorf("tunnels: concurrency %d and duration %s must be positive", cfg.Concurrency, cfg.Duration)
	}
	if cfg.Payload <= 0 {
		cfg.Payload = 64
	}
	if cfg.IOTimeout <= 0 {
		cfg.IOTimeout = 5 * time.Second
	}
	workers := make([]tunnelWorker, cfg.Concurrency)
	cpu0 := selfCPU()
	start := time.Now()
	end := start.Add(cfg.Duration)
	var wg sync.WaitGroup
	for i := range workers {
		w := &workers[i]
		w.errs = make(map[string]int64)
		wg.Go(func() { w.run(ctx, cfg, end) })
	}
	wg.Wait()
	elapsed := time.Since(start)

	res := TunnelResult{Mode: cfg.Target.Mode(), Concurrency: cfg.Concurrency, ElapsedNs: elapsed.Nanoseconds(), CPUNs: selfCPU() - cpu0}
	var lat []int64
	for i := range workers {
		w := &workers[i]
		lat = append(lat, w.lat...)
		for k, n := range w.errs {
			if res.ErrorKinds == nil {
				res.ErrorKinds = make(map[string]int64)
			}
			res.ErrorKinds[k] += n
			res.Errors += n
		}
		if res.FirstError == "" && w.firstErr != nil {
			res.FirstError = w.firstErr.Error()
		}
	}
	res.Tunnels = int64(len(lat))
	res.PerSecond = float64(res.Tunnels) / elapsed.Seconds()
	slices.Sort(lat)
	res.P50Ns = Percentile(lat, 50)
	res.P99Ns = Percentile(lat, 99)
	return res, nil
}

func (w *tunnelWorker) run(ctx context.Context, cfg TunnelConfig, end time.Time) {
	d := &net.Dialer{}
	head := make([]byte, maxConnectResponse)
	out := bytes.Repeat([]byte{'x'}, cfg.Payload)
	in := make([]byte, cfg.Payload)
	for ctx.Err() == nil {
		t0 := time.Now()
		if !t0.Before(end) {
			return
		}
		if err := oneTunnel(ctx, d, cfg.Target, t0.Add(cfg.IOTimeout), head, out, in); err != nil {
			w.errs[errorKind(err)]++
			if w.firstErr == nil {
				w.firstErr = err
			}
			continue
		}
		w.lat = append(w.lat, time.Since(t0).Nanoseconds())
	}
}

func oneTunnel(ctx context.Context, d *net.Dialer, t Target, deadline time.Time, head, out, in []byte) error {
	c, err := dial(ctx, d, t, deadline, head)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	if _, err := c.Write(out); err != nil {
		return step("echo-write", err)
	}
	if _, err := io.ReadFull(c, in); err != nil {
		return step("echo-read", err)
	}
	if !bytes.Equal(in, out) {
		return step("echo-mismatch", errors.New("echoed bytes differ from the payload"))
	}
	return nil
}

// Percentile returns the p-th percentile (nearest rank) of sorted values,
// or 0 when there are none.
func Percentile(sorted []int64, p float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(float64(len(sorted))*p/100+0.5) - 1
	return sorted[max(0, min(rank, len(sorted)-1))]
}

// selfCPU is this process's CPU time so far (user and system), in ns; 0
// when the kernel will not say.
func selfCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
