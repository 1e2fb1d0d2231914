package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/stockade-dev/stockade/bench/loadgen"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: loadgen upstream|tunnels|bulk|hold [flags]")
	}
	fs := flag.NewFlagSet("loadgen "+args[0], flag.ContinueOnError)
	var result any
	var exec func() error
	switch args[0] {
	case "upstream":
		echo := fs.String("echo", "127.0.0.1:0", "echo listen address")
		sink := fs.String("sink", "127.0.0.1:0", "sink listen address")
		lifetime := fs.Duration("lifetime", time.Hour, "exit after this long")
		exec = func() error { return upstream(ctx, out, *echo, *sink, *lifetime) }
	case "tunnels":
		var cfg loadgen.TunnelConfig
		targetFlags(fs, &cfg.Target)
		fs.IntVar(&cfg.Concurrency, "c", 16, "concurrent workers")
		fs.DurationVar(&cfg.Duration, "d", 10*time.Second, "duration")
		fs.IntVar(&cfg.Payload, "payload", 64, "bytes echoed per tunnel")
		exec = func() (err error) { result, err = loadgen.Tunnels(ctx, cfg); return err }
	case "bulk":
		var cfg loadgen.BulkConfig
		targetFlags(fs, &cfg.Target)
		fs.DurationVar(&cfg.Duration, "d", 10*time.Second, "duration")
		fs.IntVar(&cfg.BufSize, "buf", 64<<10, "bytes per write")
		exec = func() (err error) { result, err = loadgen.Bulk(ctx, cfg); return err }
	case "hold":
		var cfg loadgen.HoldConfig
		targetFlags(fs, &cfg.Target)
		fs.IntVar(&cfg.N, "n", 1000, "tunnels to hold open together")
		fs.IntVar(&cfg.Concurrency, "c", 16, "tunnels being opened at once")
		fs.DurationVar(&cfg.Hold, "d", 5*time.Second, "how long to hold them once open")
		enc := json.NewEncoder(out)
		var printErr error
		held := func(r loadgen.HoldResult) { printErr = enc.Encode(r) }
		exec = func() error {
			r, err := loadgen.Hold(ctx, cfg, held)
			if err == nil && printErr != nil {
				err = fmt.Errorf("print the held report: %w", printErr)
			}
			result = r
			return err
		}
	default:
		return fmt.Errorf("unknown subcommand %q (want upstream, tunnels, bulk or hold)", args[0])
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if err := exec(); err != nil {
		return err
	}
	if result == nil {
		return nil
	}
	return json.NewEncoder(out).Encode(result)
}

func targetFlags(fs *flag.FlagSet, t *loadgen.Target) {
	fs.StringVar(&t.Proxy, "proxy", "", "HTTP proxy address; empty dials the target directly")
	fs.StringVar(&t.Addr, "target", "", "host:port to reach (CONNECT authority through a proxy)")
}

func upstream(ctx context.Context, out io.Writer, echo, sink string, lifetime time.Duration) error {
	u, err := loadgen.ListenUpstream(echo, sink)
	if err != nil {
		return err
	}
	addrs := map[string]string{"echo": u.EchoAddr(), "sink": u.SinkAddr()}
	if err := json.NewEncoder(out).Encode(addrs); err != nil {
		_ = u.Close()
		return fmt.Errorf("print addresses: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, lifetime)
	defer cancel()
	return u.Serve(ctx)
}
