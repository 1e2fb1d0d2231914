package testenv

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
)

// Buffer is a bytes.Buffer safe for concurrent use: a log sink that actors
// write to while a test reads it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// LimitedLines reads a JSON log (zerolog's lines; the message under
// "message" or "msg") bounded by an
// audit.NewLineLimit of component: it counts the lines isLine picks (by
// their message), the limit's report lines, and the lines those reports
// say were not logged.
func LimitedLines(log, component string, isLine func(msg string) bool) (lines, reports, notLogged int) {
	for _, line := range strings.Split(log, "\n") {
		var e struct {
			Message   string `json:"message"`
			Msg       string `json:"msg"` // the stockade binary's key
			Component string `json:"component"`
			NotLogged int    `json:"notLogged"`
		}
		if json.Unmarshal([]byte(line), &e) != nil {
			continue
		}
		switch {
		case isLine(e.Message + e.Msg):
			lines++
		case e.Component == component && e.NotLogged > 0:
			reports++
			notLogged += e.NotLogged
		}
	}
	return lines, reports, notLogged
}
