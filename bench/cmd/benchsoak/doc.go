// Command benchsoak is `make bench-soak`: it runs a tunnels load (16
// clients by default) through stockade's standalone boundary (`stockade
// boundary serve`, full path: netlink identity, policy, audit) for a long
// time (10 minutes by default), samples the boundary's RSS and open file
// descriptors every 10 s, prints the samples and the verdict, and exits 1
// when the RSS grew (harness.SoakRule: the last window's median over 1.2x
// the first window's after the warm-up, plus 8 MiB) or the run failed, 2
// on bad flags, 0 otherwise. Run it from the module root:
//
//	go run ./bench/cmd/benchsoak [-duration 10m] [-interval 10s] [-c 16] [-stockade bin/stockade]
//
// Progress goes to stderr, the report to stdout. Everything stays on
// 127.0.0.1 and every process it starts is gone when it exits.
package main
