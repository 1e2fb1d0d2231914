package logs

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// The workload's output in workload.log and its rotated files
// (workload.log.1, the newest, to workload.log.N), as the supervisor writes
// it: each file starts with WorkloadHeader, then one line per line of
// output,
//
//	TIME STREAM LINE
//
// TIME the unix time in milliseconds, STREAM one byte (WorkloadOut,
// WorkloadErr, or WorkloadMarker: the supervisor's own line saying how
// many lines it dropped), LINE the bytes the workload wrote (no newline:
// output is cut at them; not necessarily UTF-8). A line of "y" takes 18
// bytes where its JSON object took 38. The stream byte is written by the
// supervisor, never taken from the output: a workload cannot forge a
// marker, a time or the other stream.
//
// Files without the header are of earlier supervisors and read as they
// were written: a JSON object per line ({"t": unix ms, "s": "out" or
// "err", "l": the line}), or plain lines (the file's time, stdout).
const WorkloadHeader = "#stockade workload log 2: unix-ms stream(o=out e=err m=stockade) line\n"

// Stream bytes of WorkloadHeader's form.
const (
	WorkloadOut    byte = 'o'
	WorkloadErr    byte = 'e'
	WorkloadMarker byte = 'm'
)

// StreamStockade is Entry.Stream of a marker line: not the workload's
// output, the supervisor's word about it (lines dropped, and why).
const StreamStockade = "stockade"

// AppendWorkloadPrefix appends what starts a line of stream at t: "TIME
// STREAM " (the line's bytes and a newline follow).
func AppendWorkloadPrefix(b []byte, t time.Time, stream byte) []byte {
	b = strconv.AppendInt(b, t.UnixMilli(), 10)
	return append(b, ' ', stream, ' ')
}

// parseWorkload turns a line of a file in WorkloadHeader's form into an
// entry; ok is false for the header and for a line that is not in the
// form.
func parseWorkload(line []byte) (*Entry, bool) {
	sp := bytes.IndexByte(line, ' ')
	if sp <= 0 || len(line) < sp+3 || line[sp+2] != ' ' {
		return nil, false
	}
	ms, err := strconv.ParseInt(string(line[:sp]), 10, 64)
	if err != nil {
		return nil, false
	}
	var st string
	switch line[sp+1] {
	case WorkloadOut:
		st = StreamOut
	case WorkloadErr:
		st = StreamErr
	case WorkloadMarker:
		st = StreamStockade
	default:
		return nil, false
	}
	// Bytes that are not UTF-8 become U+FFFD: an entry's text is a string
	// for the wire and for JSON.
	text := strings.ToValidUTF8(string(line[sp+3:]), "\uFFFD")
	return &Entry{Time: time.UnixMilli(ms), Source: SourceWorkload, Stream: st, Text: clip(text)}, true
}

// workloadLine is a line of workload.log as supervisors before
// WorkloadHeader's form wrote it.
type workloadLine struct {
	T int64  `json:"t"`
	S string `json:"s"`
	L string `json:"l"`
}

// parseLegacyWorkload turns a line of a file of an earlier supervisor
// into an entry: a JSON object, or a plain line (stdout and stderr
// together, no time but the file's, mtime).
func parseLegacyWorkload(line []byte, mtime time.Time) *Entry {
	var w workloadLine
	if line[0] != '{' || json.Unmarshal(line, &w) != nil {
		return &Entry{Time: mtime, Source: SourceWorkload, Stream: StreamOut, Text: clip(strings.ToValidUTF8(string(line), "\uFFFD"))}
	}
	st := StreamOut
	if w.S == StreamErr {
		st = StreamErr
	}
	return &Entry{Time: time.UnixMilli(w.T), Source: SourceWorkload, Stream: st, Text: clip(w.L)}
}
