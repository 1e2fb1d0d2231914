package loadgen

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// HoldConfig is one hold load: N tunnels opened and kept open together.
type HoldConfig struct {
	Target      Target
	N           int           // tunnels to open, >= 1
	Concurrency int           // tunnels being opened at once; default 16
	Hold        time.Duration // how long the open tunnels are kept, > 0
	IOTimeout   time.Duration // bound on opening one tunnel and on each check; default 10s
}

// HoldResult is what a hold load measured. Phase is "held" in the report
// made once every tunnel was tried (the tunnels are open then) and "done"
// in the final one.
type HoldResult struct {
	Phase       string           `json:"phase"`
	Mode        string           `json:"mode"`
	Requested   int              `json:"requested"`
	Established int              `json:"established"` // opened and echoed a byte
	Alive       int              `json:"alive"`       // of those, echoed again at the end of the hold
	Errors      int64            `json:"errors"`
	ErrorKinds  map[string]int64 `json:"errorKinds,omitempty"`
	FirstError  string           `json:"firstError,omitempty"`
	OpenNs      int64            `json:"openNs"` // from the start until every tunnel was tried
	HeldNs      int64            `json:"heldNs"` // how long they were kept open
}

// holdTally collects the outcome of many attempts from several goroutines.
type holdTally struct {
	mu    sync.Mutex
	conns []*tunnelConn
	errs  map[string]int64
	first error
}

func (t *holdTally) add(c *tunnelConn, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err == nil {
		t.conns = append(t.conns, c)
		return
	}
	t.errs[errorKind(err)]++
	if t.first == nil {
		t.first = err
	}
}

// Hold opens cfg.N tunnels (cfg.Concurrency at a time), each proved by a
// one-byte echo, and calls held with a "held" result once every tunnel was
// tried. It then keeps them open for cfg.Hold (or until ctx is done),
// proves each still carries bytes with a second echo, closes them all and
// returns the "done" result. It fails only on a bad config; tunnel failures
// are counted in the result.
func Hold(ctx context.Context, cfg HoldConfig, held func(HoldResult)) (HoldResult, error) {
	if cfg.N < 1 || cfg.Hold <= 0 {
		return HoldResult{}, fmt.Errorf("hold: n %d and hold %s must be positive", cfg.N, cfg.Hold)
	}
	if cfg.Concurrency < 1 {
		cfg.Concurrency = 16
	}
	if cfg.IOTimeout <= 0 {
		cfg.IOTimeout = 10 * time.Second
	}
	tally := &holdTally{errs: map[string]int64{}}
	defer func() {
		for _, c := range tally.conns {
			_ = c.Close()
		}
	}()
	start := time.Now()
	next := make(chan struct{})
	var wg sync.WaitGroup
	for range min(cfg.Concurrency, cfg.N) {
		wg.Go(func() {
			d := &net.Dialer{}
			head := make([]byte, maxConnectResponse)
			for range next {
				tally.add(openHeld(ctx, d, cfg.Target, time.Now().Add(cfg.IOTimeout), head))
			}
		})
	}
	for range cfg.N {
		if ctx.Err() != nil {
			break
		}
		next <- struct{}{}
	}
	close(next)
	wg.Wait()
	res := HoldResult{Phase: "held", Mode: cfg.Target.Mode(), Requested: cfg.N, OpenNs: time.Since(start).Nanoseconds()}
	tally.fill(&res)
	if held != nil {
		held(res)
	}
	heldAt := time.Now()
	select {
	case <-ctx.Done():
	case <-time.After(cfg.Hold):
	}
	res.HeldNs = time.Since(heldAt).Nanoseconds()
	res.Phase = "done"
	for _, c := range tally.conns {
		if err := echoByte(c, time.Now().Add(cfg.IOTimeout)); err == nil {
			res.Alive++
		}
	}
	return res, nil
}

func (t *holdTally) fill(res *HoldResult) {
	t.mu.Lock()
	defer t.mu.Unlock()
	res.Established = len(t.conns)
	for k, n := range t.errs {
		if res.ErrorKinds == nil {
			res.ErrorKinds = map[string]int64{}
		}
		res.ErrorKinds[k] = n
		res.Errors += n
	}
	if t.first != nil {
		res.FirstError = t.first.Error()
	}
}

// openHeld opens one tunnel and proves it with a one-byte echo; the
// returned connection has no deadline.
func openHeld(ctx context.Context, d *net.Dialer, t Target, deadline time.Time, head []byte) (*tunnelConn, error) {
	c, err := dial(ctx, d, t, deadline, head)
	if err != nil {
		return nil, err
	}
	if err := echoByte(c, deadline); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// echoByte writes one byte and wants it back before deadline, then clears
// the connection's deadline.
func echoByte(c *tunnelConn, deadline time.Time) error {
	if err := c.SetDeadline(deadline); err != nil {
		return step("echo-write", err)
	}
	if _, err := c.Write([]byte{'h'}); err != nil {
		return step("echo-write", err)
	}
	var in [1]byte
	if _, err := io.ReadFull(c, in[:]); err != nil {
		return step("echo-read", err)
	}
	if !bytes.Equal(in[:], []byte{'h'}) {
		return step("echo-mismatch", errors.New("echoed byte differs"))
	}
	if err := c.SetDeadline(time.Time{}); err != nil {
		return step("echo-read", err)
	}
	return nil
}
