package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/bench/harness"
)

func main() {
	os.Exit(run())
}

func run() int {
	cfg := harness.DefaultSoakConfig()
	fs := flag.NewFlagSet("benchsoak", flag.ContinueOnError)
	fs.StringVar(&cfg.RepoDir, "repo", cfg.RepoDir, "module root")
	fs.StringVar(&cfg.Stockade, "stockade", "", "prebuilt stockade binary (default: go build ./cmd/stockade)")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "length of the load (at most 3h)")
	fs.DurationVar(&cfg.Interval, "interval", cfg.Interval, "between RSS samples")
	fs.IntVar(&cfg.Concurrency, "c", cfg.Concurrency, "tunnels workers")
	fs.StringVar(&cfg.Identity, "identity", cfg.Identity, "stockade --identity: netlink or none")
	fs.BoolVar(&cfg.Audit, "audit", cfg.Audit, "run stockade with --audit FILE")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the run dir (configs, server logs)")
	verbose := fs.Bool("v", false, "debug logging")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: benchsoak [flags]\n\nExit 1 when %s.\n\n", harness.SoakRule)
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	level := zerolog.InfoLevel
	if *verbose {
		level = zerolog.DebugLevel
	}
	cfg.Log = zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: time.TimeOnly}).Level(level).With().Timestamp().Logger()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The whole run is bounded: building, starting, the load, stopping.
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration+10*time.Minute)
	defer cancel()
	report, err := harness.Soak(ctx, cfg)
	if report != nil {
		if rerr := report.Render(os.Stdout); rerr != nil {
			fmt.Fprintln(os.Stderr, "benchsoak:", rerr)
			return 1
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchsoak:", err)
		return 1
	}
	if !report.Pass() {
		return 1
	}
	return 0
}
