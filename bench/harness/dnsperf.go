package harness

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// dnsResult is one dnsperf run as printed in its "Statistics" block.
type dnsResult struct {
	Sent, Completed, Lost int64
	QPS                   float64
	Rcodes                map[string]int64 // e.g. NOERROR, REFUSED
}

// parseDNSPerf reads dnsperf 2.x output.
func parseDNSPerf(out []byte) (dnsResult, error) {
	r := dnsResult{Rcodes: map[string]int64{}}
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		key, val, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(val)
		if len(fields) == 0 {
			continue
		}
		var err error
		switch key {
		case "Queries sent":
			r.Sent, err = strconv.ParseInt(fields[0], 10, 64)
		case "Queries completed":
			r.Completed, err = strconv.ParseInt(fields[0], 10, 64)
		case "Queries lost":
			r.Lost, err = strconv.ParseInt(fields[0], 10, 64)
		case "Queries per second":
			r.QPS, err = strconv.ParseFloat(fields[0], 64)
		case "Response codes":
			err = parseRcodes(val, r.Rcodes)
		default:
			continue
		}
		if err != nil {
			return r, fmt.Errorf("dnsperf output, %q: %w", key, err)
		}
		seen[key] = true
	}
	for _, k := range []string{"Queries sent", "Queries completed", "Queries lost", "Queries per second"} {
		if !seen[k] {
			return r, fmt.Errorf("dnsperf output has no %q line", k)
		}
	}
	return r, nil
}

// parseRcodes reads "NOERROR 62 (50.41%), REFUSED 61 (49.59%)".
func parseRcodes(s string, into map[string]int64) error {
	for part := range strings.SplitSeq(s, ",") {
		f := strings.Fields(part)
		if len(f) < 2 {
			return fmt.Errorf("malformed response code %q", part)
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return fmt.Errorf("response code %q: %w", part, err)
		}
		into[f[0]] += n
	}
	return nil
}

// splitExact says whether r's response codes are exactly those of the
// query mix: the input alternates allowed and unlisted names starting with
// an allowed one, so of the first Sent queries ceil(Sent/2) must be
// NOERROR and the rest REFUSED, with none lost or answered otherwise.
func (r dnsResult) splitExact() bool {
	want := map[string]int64{"NOERROR": (r.Sent + 1) / 2, "REFUSED": r.Sent / 2}
	if r.Lost != 0 || r.Completed != r.Sent {
		return false
	}
	for code, n := range r.Rcodes {
		if n != want[code] {
			return false
		}
	}
	return r.Rcodes["NOERROR"] == want["NOERROR"] && r.Rcodes["REFUSED"] == want["REFUSED"]
}
