package harness

import (
	"bufio"
	"bytes"
	"slices"
	"strconv"
	"strings"
)

// goBench is one benchmark's results: every value reported per unit
// (ns/op, B/op, custom metrics such as p99-ns), one per -count run.
type goBench struct {
	Name   string // without the -GOMAXPROCS suffix
	Units  []string
	Values map[string][]float64
}

// parseGoBench reads `go test -bench` output generically: each line
// "BenchmarkName-P  N  v1 unit1  v2 unit2 ..." adds to the benchmark's
// values; repeated lines (-count) accumulate. Order of first appearance is
// kept.
func parseGoBench(out []byte) []*goBench {
	var list []*goBench
	byName := map[string]*goBench{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		if _, err := strconv.ParseInt(f[1], 10, 64); err != nil {
			continue
		}
		name := f[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		b := byName[name]
		if b == nil {
			b = &goBench{Name: name, Values: map[string][]float64{}}
			byName[name] = b
			list = append(list, b)
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			unit := f[i+1]
			if _, ok := b.Values[unit]; !ok {
				b.Units = append(b.Units, unit)
			}
			b.Values[unit] = append(b.Values[unit], v)
		}
	}
	return list
}

// p99Ns returns the median of the benchmark's p99 metric in nanoseconds:
// the first unit containing "p99", scaled by its time suffix (see
// durationUnit; a unit without one is taken as nanoseconds).
func (b *goBench) p99Ns() (float64, bool) {
	for _, u := range b.Units {
		if !strings.Contains(strings.ToLower(u), "p99") {
			continue
		}
		scale := 1.0
		if _, s, ok := durationUnit(u); ok {
			scale = s
		}
		return median(b.Values[u]) * scale, true
	}
	return 0, false
}

// durationUnit reads a custom benchmark unit that is a duration: a label,
// a separator ('-', '_' or '.') and a time unit (ns, us, µs, μs, ms, s),
// optionally followed by "/op": "p99-ns", "p50_us", "p99-µs/op". It returns
// the label and the factor to nanoseconds; ok is false for other units
// (ns/op, B/op, allocs/op, host-tcp, ...).
func durationUnit(u string) (label string, scale float64, ok bool) {
	base := strings.TrimSuffix(u, "/op")
	i := strings.LastIndexAny(base, "-_.")
	if i <= 0 {
		return "", 0, false
	}
	switch strings.ToLower(base[i+1:]) {
	case "ns":
		scale = 1
	case "us", "µs", "μs":
		scale = 1e3
	case "ms":
		scale = 1e6
	case "s":
		scale = 1e9
	default:
		return "", 0, false
	}
	return base[:i], scale, true
}

// median of values (0 for none); values is not modified.
func median(values []float64) float64 {
	if len(values) == 0 {
		return 0
	}
	s := slices.Clone(values)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
