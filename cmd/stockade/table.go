package main

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// layoutTime is every time the CLI prints in a table or JSON: RFC 3339,
// UTC, always three digits of milliseconds, so columns line up (Go's
// RFC3339Nano drops trailing zeros: 22:50:22.57Z).
const layoutTime = "2006-01-02T15:04:05.000Z07:00"

// layoutClock is the time of day of a watch line (local time).
const layoutClock = "15:04:05.000"

// msTime formats a Unix time in milliseconds; "" for 0 (not set).
func msTime(ms int64) string {
	if ms == 0 {
		return ""
	}
	return time.UnixMilli(ms).UTC().Format(layoutTime)
}

// age is the time since t in one unit, truncated, as kubectl and docker
// show it: 5s, 3m, 2h, 4d. A time in the future (clocks apart) is 0s; no
// time at all is "-".
func age(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	default:
		return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
	}
}

// ageMs is age of a Unix time in milliseconds (0: "-").
func ageMs(ms int64, now time.Time) string {
	if ms == 0 {
		return "-"
	}
	return age(time.UnixMilli(ms), now)
}

// sortedKeys returns m's keys in order: every map the CLI prints is
// printed in this order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// countsText is a map of counts as "k=v k=v", keys sorted; "-" when empty.
func countsText(m map[string]int64) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return dash(strings.Join(parts, " "))
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
