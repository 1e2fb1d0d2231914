package loadgen

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"
)

// BulkConfig is one bulk load: a single connection to a sink.
type BulkConfig struct {
	Target   Target
	Duration time.Duration
	BufSize  int // bytes per write; default 64 KiB
}

// BulkResult is what a bulk load measured. MBps counts bytes accepted by
// the local socket (1 MB = 1e6 bytes); what sits in socket buffers at the
// end (a few MB) is a rounding error over seconds of transfer.
type BulkResult struct {
	Mode      string  `json:"mode"`
	Bytes     int64   `json:"bytes"`
	ElapsedNs int64   `json:"elapsedNs"`
	MBps      float64 `json:"mbps"`
	Error     string  `json:"error,omitempty"`
}

// Bulk writes to cfg.Target until its duration has passed or ctx is done.
// A failure to open the connection is returned as an error; a failure
// mid-transfer is reported in the result with the bytes sent so far.
func Bulk(ctx context.Context, cfg BulkConfig) (BulkResult, error) {
	if cfg.Duration <= 0 {
		return BulkResult{}, fmt.Errorf("bulk: duration %s must be positive", cfg.Duration)
	}
	if cfg.BufSize <= 0 {
		cfg.BufSize = 64 << 10
	}
	start := time.Now()
	end := start.Add(cfg.Duration)
	c, err := dial(ctx, &net.Dialer{}, cfg.Target, start.Add(5*time.Second), make([]byte, maxConnectResponse))
	if err != nil {
		return BulkResult{}, fmt.Errorf("bulk: open %s: %w", cfg.Target.Addr, err)
	}
	defer func() { _ = c.Close() }()
	stop := context.AfterFunc(ctx, func() { _ = c.SetWriteDeadline(time.Now()) })
	defer stop()
	res := BulkResult{Mode: cfg.Target.Mode()}
	if err := c.SetDeadline(end); err != nil {
		return res, fmt.Errorf("bulk: set deadline: %w", err)
	}
	buf := make([]byte, cfg.BufSize)
	for {
		n, err := c.Write(buf)
		res.Bytes += int64(n)
		if err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				res.Error = err.Error()
			}
			break
		}
	}
	elapsed := time.Since(start)
	res.ElapsedNs = elapsed.Nanoseconds()
	res.MBps = float64(res.Bytes) / 1e6 / elapsed.Seconds()
	return res, nil
}
