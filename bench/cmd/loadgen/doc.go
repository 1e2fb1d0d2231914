// Command loadgen is the benchmark load generator and local upstream used
// by bench/cmd/benchtable. Subcommands (each prints one JSON object):
//
//	loadgen upstream [-echo 127.0.0.1:0] [-sink 127.0.0.1:0] [-lifetime 1h]
//	loadgen tunnels  [-proxy ADDR] -target HOST:PORT [-c 16] [-d 10s] [-payload 64]
//	loadgen bulk     [-proxy ADDR] -target HOST:PORT [-d 10s] [-buf 65536]
//
// upstream prints its bound addresses and serves until SIGINT/SIGTERM or
// its lifetime ends. Without -proxy, tunnels and bulk dial the target
// directly.
package main
