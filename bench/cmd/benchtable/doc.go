// Command benchtable is `make bench`: it compares stockade's standalone
// boundary (`stockade boundary serve`) with tinyproxy, dnsmasq and direct
// connections on 127.0.0.1 and prints one table of medians with the
// targets and pass/miss. Run it from the module root:
//
//	go run ./bench/cmd/benchtable [-duration 10s] [-runs 3] [-quick]
//
// It exits 1 when the run fails or (unless -fail-on-miss=false) a target
// is missed, 2 on bad flags, 0 otherwise.
// Progress goes to stderr, the table to stdout.
package main
