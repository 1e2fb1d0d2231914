// Command benchtable is `make bench`: it compares stockade's standalone
// boundary (`stockade boundary serve`) and the boundary of a sandbox's
// supervisor (a gateway and one sandbox; the loads run inside it) with
// tinyproxy, dnsmasq and direct connections on 127.0.0.1, reports their
// memory idle and with 1,000 tunnels open, and prints one table of medians
// with the targets and pass/miss. Run it from the module root (as root
// for the sandbox rows; otherwise they say why they are missing):
//
//	go run ./bench/cmd/benchtable [-duration 3s] [-runs 10] [-bench-count 3] [-quick] [-sandbox=false] [-hold 1000]
//
// It exits 1 when the run fails or (unless -fail-on-miss=false) a target
// is missed, 2 on bad flags, 0 otherwise.
// Progress goes to stderr, the table to stdout.
package main
