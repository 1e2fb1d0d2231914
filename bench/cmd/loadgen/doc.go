// Command loadgen is the benchmark load generator and local upstream used
// by bench/cmd/benchtable and bench/cmd/benchsoak. Subcommands (each
// prints one JSON object, hold two):
//
//	loadgen upstream [-echo 127.0.0.1:0] [-sink 127.0.0.1:0] [-lifetime 1h]
//	loadgen tunnels  [-proxy ADDR] -target HOST:PORT [-c 16] [-d 10s] [-payload 64]
//	loadgen bulk     [-proxy ADDR] -target HOST:PORT [-d 10s] [-buf 65536]
//	loadgen hold     [-proxy ADDR] -target HOST:PORT [-n 1000] [-c 16] [-d 5s]
//
// upstream prints its bound addresses and serves until SIGINT/SIGTERM or
// its lifetime ends. Without -proxy, tunnels, bulk and hold dial the
// target directly. hold opens N tunnels to an echo target and keeps them
// open for -d: it prints a first JSON line (phase "held") once every tunnel
// was tried, and the final one (phase "done") after closing them.
package main
