package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	flag.Parse()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gofloor: %v\n", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "gofloor: listening on %s\n", ln.Addr())
	for {
		c, err := ln.Accept()
		if err != nil {
			time.Sleep(5 * time.Millisecond) // EMFILE and friends
			continue
		}
		go serve(c)
	}
}

// serve reads one CONNECT request, dials its target and relays both ways
// until each side has sent its last byte.
func serve(c net.Conn) {
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReaderSize(c, 1024)
	target, err := readConnect(br)
	if err != nil {
		_, _ = io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	up, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		_, _ = io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
		return
	}
	defer up.Close()
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(c, up)
		_ = c.(*net.TCPConn).CloseWrite()
	}()
	if n := br.Buffered(); n > 0 { // bytes the client sent after the request
		b, _ := br.Peek(n)
		if _, err := up.Write(b); err != nil {
			return
		}
	}
	_, _ = io.Copy(up, c)
	_ = up.(*net.TCPConn).CloseWrite()
	<-done
}

// readConnect reads a CONNECT request's head (at most 64 lines) and
// returns its target.
func readConnect(br *bufio.Reader) (string, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return "", err
	}
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "CONNECT" {
		return "", fmt.Errorf("not a CONNECT: %q", line)
	}
	for range 64 {
		l, err := br.ReadString('\n')
		if err != nil {
			return "", err
		}
		if l == "\r\n" || l == "\n" {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("request head over 64 lines")
}
