package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/bench/harness"
)

func main() {
	os.Exit(run())
}

func run() int {
	cfg := harness.DefaultConfig()
	fs := flag.NewFlagSet("benchtable", flag.ContinueOnError)
	fs.StringVar(&cfg.RepoDir, "repo", cfg.RepoDir, "module root")
	fs.StringVar(&cfg.Stockade, "stockade", "", "prebuilt stockade binary (default: go build ./cmd/stockade)")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "length of each measurement")
	fs.IntVar(&cfg.Runs, "runs", cfg.Runs, "runs of each measurement (median shown)")
	quick := fs.Bool("quick", false, "smoke test: 2s measurements, 1 run")
	conc := fs.String("c", "1,16,64", "tunnels concurrency levels")
	fs.StringVar(&cfg.Identity, "identity", cfg.Identity, "stockade --identity: netlink or none")
	fs.BoolVar(&cfg.Audit, "audit", cfg.Audit, "run stockade with --audit FILE")
	fs.StringVar(&cfg.Binary, "binary", cfg.Binary, "policy binaries path glob")
	fs.IntVar(&cfg.DNSNames, "dns-names", cfg.DNSNames, "allowed DNS names (as many unlisted)")
	fs.IntVar(&cfg.DNSClients, "dns-clients", cfg.DNSClients, "dnsperf -c")
	fs.IntVar(&cfg.DNSThreads, "dns-threads", cfg.DNSThreads, "dnsperf -T")
	fs.IntVar(&cfg.DNSOutstanding, "dns-outstanding", cfg.DNSOutstanding, "dnsperf -q")
	fs.IntVar(&cfg.DNSQPS, "dns-qps", cfg.DNSQPS, "dnsperf -Q (0: unlimited)")
	fs.StringVar(&cfg.BenchTime, "benchtime", cfg.BenchTime, "go test -benchtime")
	fs.IntVar(&cfg.BenchCount, "bench-count", cfg.BenchCount, "go test -count (median shown)")
	pkgs := fs.String("bench-pkgs", strings.Join(cfg.BenchPkgs, ","), "packages whose Go benchmarks join the table (empty: none)")
	fs.Func("stockade-arg", "extra argument for `stockade boundary serve` (repeatable)", func(v string) error {
		cfg.StockadeArgs = append(cfg.StockadeArgs, v)
		return nil
	})
	fs.BoolVar(&cfg.Sandbox, "sandbox", cfg.Sandbox, "also measure a sandbox's supervisor (a gateway and a sandbox; needs root)")
	fs.IntVar(&cfg.HoldTunnels, "hold", cfg.HoldTunnels, "tunnels held open for the RSS rows (0: no such rows; at most 1000)")
	fs.DurationVar(&cfg.HoldFor, "hold-for", cfg.HoldFor, "how long they are held (-quick: 3s)")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the run dir (configs, server logs)")
	timeout := fs.Duration("timeout", time.Hour, "bound on the whole run")
	verbose := fs.Bool("v", false, "debug logging")
	failOnMiss := fs.Bool("fail-on-miss", true, "exit 1 when a target is missed")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	if *quick {
		holdFor := cfg.HoldFor
		cfg = cfg.Quick()
		if explicit(fs, "hold-for") {
			cfg.HoldFor = holdFor
		}
	}
	cfg.Concurrency = nil
	for f := range strings.SplitSeq(*conc, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "benchtable: bad -c %q\n", *conc)
			return 2
		}
		cfg.Concurrency = append(cfg.Concurrency, n)
	}
	cfg.BenchPkgs = strings.FieldsFunc(*pkgs, func(r rune) bool { return r == ',' })
	level := zerolog.InfoLevel
	if *verbose {
		level = zerolog.DebugLevel
	}
	cfg.Log = zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: time.TimeOnly}).Level(level).With().Timestamp().Logger()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	report, err := harness.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		return 1
	}
	if err := report.Render(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		return 1
	}
	if n := report.Misses(); n > 0 {
		fmt.Fprintf(os.Stderr, "benchtable: %d target(s) missed\n", n)
		if *failOnMiss {
			return 1
		}
	}
	return 0
}

// explicit says whether the flag name was given on the command line.
func explicit(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}
