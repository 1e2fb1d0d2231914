// Command upstream is the local offline upstream of `make run`: a tiny HTTP
// server on loopback that answers every request with a line naming itself,
// so the demo shows traffic going through the boundary without leaving
// the machine.
package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:18080", "listen address (loopback)")
	flag.Parse()
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from the local upstream: %s %s (Host: %s)\n", r.Method, r.URL.Path, r.Host)
	})
	if err := http.ListenAndServe(*addr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "upstream:", err)
		os.Exit(1)
	}
}
