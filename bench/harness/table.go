package harness

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Verdict is a row's outcome against its target.
type Verdict int

// Verdicts. Info rows have no target; NotRun rows could not be measured.
const (
	Info   Verdict = 0
	Pass   Verdict = 1
	Miss   Verdict = 2
	NotRun Verdict = 3
)

func (v Verdict) String() string {
	switch v {
	case Info:
		return "-"
	case Pass:
		return "pass"
	case Miss:
		return "MISS"
	case NotRun:
		return "n/a"
	default:
		return fmt.Sprintf("Verdict(%d)", int(v))
	}
}

// Row is one line of the table. Empty cells render as "-".
type Row struct {
	Name, Stockade, Peer, Direct, Ratio, Target string
	Verdict                                     Verdict
}

// Report is the harness's output: header lines, the table, notes.
type Report struct {
	Header []string
	Rows   []Row
	Notes  []string
}

// Misses counts rows that missed their target.
func (r *Report) Misses() int {
	n := 0
	for _, row := range r.Rows {
		if row.Verdict == Miss {
			n++
		}
	}
	return n
}

// Render writes the report as text with one markdown-compatible table.
func (r *Report) Render(w io.Writer) error {
	var b strings.Builder
	for _, h := range r.Header {
		b.WriteString(h + "\n")
	}
	b.WriteString("\n")
	cells := [][]string{{"row", "stockade", "peer", "direct", "ratio", "target", "result"}}
	for _, row := range r.Rows {
		cells = append(cells, []string{row.Name, row.Stockade, row.Peer, row.Direct, row.Ratio, row.Target, row.Verdict.String()})
	}
	width := make([]int, len(cells[0]))
	for _, line := range cells {
		for i, c := range line {
			if c == "" {
				line[i] = "-"
			}
			width[i] = max(width[i], utf8.RuneCountInString(line[i]))
		}
	}
	for n, line := range cells {
		for i, c := range line {
			fmt.Fprintf(&b, "| %s%s ", c, strings.Repeat(" ", width[i]-utf8.RuneCountInString(c)))
		}
		b.WriteString("|\n")
		if n == 0 {
			for i := range line {
				fmt.Fprintf(&b, "|%s", strings.Repeat("-", width[i]+2))
			}
			b.WriteString("|\n")
		}
	}
	if len(r.Notes) > 0 {
		b.WriteString("\nNotes:\n")
		for _, n := range r.Notes {
			b.WriteString("- " + n + "\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// fmtRate formats a per-second figure.
func fmtRate(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// fmtDur formats nanoseconds in the most readable unit.
func fmtDur(ns float64) string {
	switch d := time.Duration(ns); {
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2fms", ns/1e6)
	case d >= time.Microsecond || d <= -time.Microsecond:
		return fmt.Sprintf("%.1fµs", ns/1e3)
	default:
		return fmt.Sprintf("%.0fns", ns)
	}
}

// fmtNum formats a metric value: integers as such, others to 4 digits.
func fmtNum(v float64) string {
	if v == float64(int64(v)) {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// fmtRatio formats a/b, or "" when either is not positive.
func fmtRatio(a, b float64) string {
	if a <= 0 || b <= 0 {
		return ""
	}
	return fmt.Sprintf("%.2fx", a/b)
}

// judge returns Pass when ok, else Miss.
func judge(ok bool) Verdict {
	if ok {
		return Pass
	}
	return Miss
}
