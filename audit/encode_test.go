package audit

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/policy/reason"
)

// testSeed returns the seed of a randomized test: AUDIT_TEST_SEED when set
// (to replay a failure), else a fresh one. It is printed when the test
// fails.
func testSeed(t *testing.T) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("AUDIT_TEST_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("AUDIT_TEST_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("random seed %d (replay: AUDIT_TEST_SEED=%d go test -run '^%s$' ./audit/)", seed, seed, t.Name())
		}
	})
	return seed
}

// nastyPieces are the fragments random strings are made of: everything
// encoding/json escapes or replaces, and what it leaves alone next to it.
var nastyPieces = []string{
	`"`, `\`, `/`, `\"`, `\\u0000`, "<", ">", "&", "<script>", "&amp;",
	"\x00", "\x01", "\b", "\t", "\n", "\v", "\f", "\r", "\x1b", "\x1f", " ", "\x7f",
	"\u2028", "\u2029", "\u2027", "\u202a", "\u0085", "\u00a0", "\ufeff", "\ufffd",
	"é", "ü", "日本語", "😀", "\U0010ffff",
	"\xff", "\xfe", "\x80", "\xc3", "\xe2\x80", "\xe2\x80\xa8\xa8", "\xed\xa0\x80", // invalid UTF-8
	"\xc0\xaf", "\xf4\x90\x80\x80", "\xf0\x9f\x98", "\xe2\x28\xa1",
	"a", "Z", "0", "example.org", "/usr/bin/curl", ":", ".", "-", "_", "%", "'", "`", "{}", "[]",
}

// randString returns a random string: often empty or short, sometimes
// long, sometimes random bytes.
func randString(r *rand.Rand) string {
	switch r.IntN(40) {
	case 0, 1, 2, 3:
		return ""
	case 4, 5, 6: // random bytes, mostly invalid UTF-8
		b := make([]byte, r.IntN(40))
		for i := range b {
			b[i] = byte(r.UintN(256))
		}
		return string(b)
	case 7: // long
		var sb strings.Builder
		for sb.Len() < 2000+r.IntN(6000) {
			sb.WriteString(nastyPieces[r.IntN(len(nastyPieces))])
		}
		return sb.String()
	default:
		var sb strings.Builder
		for n := r.IntN(12); n > 0; n-- {
			sb.WriteString(nastyPieces[r.IntN(len(nastyPieces))])
		}
		return sb.String()
	}
}

func randInt(r *rand.Rand) int {
	switch r.IntN(6) {
	case 0:
		return 0
	case 1:
		return math.MaxInt
	case 2:
		return math.MinInt
	case 3:
		return r.IntN(70000)
	case 4:
		return -r.IntN(1000)
	default:
		return int(r.Int64())
	}
}

func randUint64(r *rand.Rand) uint64 {
	switch r.IntN(4) {
	case 0:
		return 0
	case 1:
		return math.MaxUint64
	case 2:
		return r.Uint64N(100)
	default:
		return r.Uint64()
	}
}

func randInt64(r *rand.Rand) int64 {
	switch r.IntN(5) {
	case 0:
		return 0
	case 1:
		return math.MaxInt64
	case 2:
		return math.MinInt64
	case 3:
		return time.Now().UnixMilli() + r.Int64N(1e6)
	default:
		return r.Int64() - r.Int64()
	}
}

func randStrings(r *rand.Rand) []string {
	switch r.IntN(4) {
	case 0:
		return nil
	case 1:
		return []string{}
	default:
		s := make([]string, 1+r.IntN(5))
		for i := range s {
			s[i] = randString(r)
		}
		return s
	}
}

func randProcess(r *rand.Rand) Process {
	var p Process
	if r.IntN(2) == 0 {
		p.Path = randString(r)
	}
	if r.IntN(2) == 0 {
		p.Pid = randInt(r)
	}
	p.Ancestors = randStrings(r)
	return p
}

func randEndpoint(r *rand.Rand) *Endpoint {
	if r.IntN(3) == 0 {
		return nil
	}
	ep := &Endpoint{}
	if r.IntN(2) == 0 {
		ep.Hostname = randString(r)
	}
	if r.IntN(2) == 0 {
		ep.IP = randString(r)
	}
	if r.IntN(2) == 0 {
		ep.Port = randInt(r)
	}
	return ep
}

// mapKeyPieces make keys that sort close to each other (prefixes, case,
// NUL, bytes above ASCII), so key order is really tested.
var mapKeyPieces = []string{"", "a", "A", "b", "\x00", "é", "\xff", "identity", "ident", "<", "\u2028"}

func randMap(r *rand.Rand) map[string]string {
	switch r.IntN(4) {
	case 0:
		return nil
	case 1:
		return map[string]string{}
	default:
		m := map[string]string{}
		for n := 1 + r.IntN(14); n > 0; n-- { // more than appendStringMap's stack array at times
			var k string
			if r.IntN(3) == 0 {
				k = randString(r)
			} else {
				for p := r.IntN(4); p > 0; p-- {
					k += mapKeyPieces[r.IntN(len(mapKeyPieces))]
				}
			}
			m[k] = randString(r)
		}
		return m
	}
}

// randEvent returns an Event with every field independently set or not,
// pointers nil or not, slices and maps nil, empty or filled.
func randEvent(r *rand.Rand) Event {
	e := Event{
		Time:   time.Unix(0, r.Int64()).Add(-time.Duration(r.Int64())),
		TimeMs: randInt64(r),
	}
	if r.IntN(3) == 0 {
		e = NewDecision([]Class{ClassDNS, ClassNetwork, ClassLifecycle}[r.IntN(3)], r.IntN(2) == 0, reason.All()[r.IntN(len(reason.All()))])
	} else {
		e.ClassUID = Class(randInt(r))
		e.ActionID = Action(randInt(r))
		e.SeverityID = Severity(randInt(r))
		e.ActivityID = randInt(r)
	}
	set := func(s *string) {
		if r.IntN(2) == 0 {
			*s = randString(r)
		}
	}
	set(&e.ClassName)
	set(&e.ActivityName)
	set(&e.ActionName)
	set(&e.Disposition)
	set(&e.SeverityName)
	set(&e.Sandbox)
	set(&e.Message)
	if r.IntN(2) == 0 {
		e.Reason = reason.Code(randString(r))
	}
	if r.IntN(2) == 0 {
		p := randProcess(r)
		e.Actor = &p
	}
	switch r.IntN(4) {
	case 0:
	case 1:
		e.Holders = []Process{}
	default:
		for n := 1 + r.IntN(4); n > 0; n-- {
			e.Holders = append(e.Holders, randProcess(r))
		}
	}
	e.Src, e.Dst = randEndpoint(r), randEndpoint(r)
	if r.IntN(2) == 0 {
		q := &Query{}
		set(&q.Hostname)
		set(&q.Type)
		set(&q.Rcode)
		e.Query = q
	}
	set(&e.Policy.Name)
	set(&e.Policy.PolicyName)
	set(&e.Policy.Engine)
	if r.IntN(2) == 0 {
		e.Policy.Version = randUint64(r)
	}
	e.Unmapped = randMap(r)
	return e
}

// firstDiff describes where two encodings part, with context.
func firstDiff(got, want []byte) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	lo := max(0, i-40)
	return fmt.Sprintf("at byte %d:\n got …%q…\nwant …%q…", i, got[lo:min(len(got), i+40)], want[lo:min(len(want), i+40)])
}

// TestAppendJSONMatchesMarshal: for random events the hand-written encoder
// writes exactly the bytes of encoding/json, including into a buffer that
// already holds data.
func TestAppendJSONMatchesMarshal(t *testing.T) {
	seed := testSeed(t)
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	n := 20000
	if testing.Short() || raceEnabled {
		n = 2000
	}
	fixed := []Event{{}, benchDNSEvent(), benchNetEvent(true), benchNetEvent(false),
		NewDecision(ClassLifecycle, true, reason.None), {Actor: &Process{}, Holders: []Process{{}}, Src: &Endpoint{}, Query: &Query{}}}
	buf := []byte("prefix\n")
	for i := 0; i < n; i++ {
		var e Event
		if i < len(fixed) {
			e = fixed[i]
		} else {
			e = randEvent(r)
		}
		want, err := json.Marshal(&e)
		if err != nil {
			t.Fatalf("event %d: json.Marshal: %v", i, err)
		}
		buf = e.AppendJSON(buf[:7])
		if got := buf[7:]; !bytes.Equal(got, want) {
			t.Fatalf("event %d: AppendJSON differs from json.Marshal %s\nevent: %#v", i, firstDiff(got, want), e)
		}
		if string(buf[:7]) != "prefix\n" {
			t.Fatalf("event %d: AppendJSON changed the bytes before it: %q", i, buf[:7])
		}
	}
}

// TestEncodedTypesUnchanged fails when a field of an encoded type is added,
// removed, retyped or retagged, or when one of them gains a JSON or text
// marshaler: AppendJSON must then be taught the change (the randomized test
// would not see a new omitempty field it never sets).
func TestEncodedTypesUnchanged(t *testing.T) {
	var got []string
	for _, v := range []any{Event{}, Process{}, Endpoint{}, Query{}, PolicyRef{}} {
		rt := reflect.TypeOf(v)
		for i := 0; i < rt.NumField(); i++ {
			f := rt.Field(i)
			got = append(got, fmt.Sprintf("%s.%s %s %q", rt.Name(), f.Name, f.Type, f.Tag.Get("json")))
		}
	}
	want := []string{
		`Event.Time time.Time "-"`,
		`Event.TimeMs int64 "time"`,
		`Event.ClassUID audit.Class "class_uid"`,
		`Event.ClassName string "class_name"`,
		`Event.ActivityID int "activity_id"`,
		`Event.ActivityName string "activity_name"`,
		`Event.ActionID audit.Action "action_id"`,
		`Event.ActionName string "action"`,
		`Event.Disposition string "disposition"`,
		`Event.SeverityID audit.Severity "severity_id"`,
		`Event.SeverityName string "severity"`,
		`Event.Sandbox string "sandbox,omitempty"`,
		`Event.Actor *audit.Process "actor,omitempty"`,
		`Event.Holders []audit.Process "holders,omitempty"`,
		`Event.Src *audit.Endpoint "src_endpoint,omitempty"`,
		`Event.Dst *audit.Endpoint "dst_endpoint,omitempty"`,
		`Event.Query *audit.Query "query,omitempty"`,
		`Event.Policy audit.PolicyRef "policy"`,
		`Event.Reason reason.Code "status_detail,omitempty"`,
		`Event.Message string "message,omitempty"`,
		`Event.Unmapped map[string]string "unmapped,omitempty"`,
		`Process.Path string "path,omitempty"`,
		`Process.Pid int "pid,omitempty"`,
		`Process.Ancestors []string "ancestors,omitempty"`,
		`Endpoint.Hostname string "hostname,omitempty"`,
		`Endpoint.IP string "ip,omitempty"`,
		`Endpoint.Port int "port,omitempty"`,
		`Query.Hostname string "hostname"`,
		`Query.Type string "type"`,
		`Query.Rcode string "rcode,omitempty"`,
		`PolicyRef.Name string "name"`,
		`PolicyRef.PolicyName string "policyName,omitempty"`,
		`PolicyRef.Version uint64 "version"`,
		`PolicyRef.Engine string "engine"`,
	}
	if g, w := strings.Join(got, "\n"), strings.Join(want, "\n"); g != w {
		t.Fatalf("the encoded types changed; update AppendJSON (encode.go) and this list.\n got:\n%s\nwant:\n%s", g, w)
	}
	marshaler := reflect.TypeFor[json.Marshaler]()
	text := reflect.TypeFor[encoding.TextMarshaler]()
	for _, v := range []any{Event{}, Process{}, Endpoint{}, Query{}, PolicyRef{}, Class(0), Action(0), Severity(0), reason.Code(""), time.Time{}} {
		for _, rt := range []reflect.Type{reflect.TypeOf(v), reflect.PointerTo(reflect.TypeOf(v))} {
			if rt == reflect.TypeFor[time.Time]() || rt == reflect.TypeFor[*time.Time]() {
				continue // Time is tagged "-": its marshalers are never used
			}
			if rt.Implements(marshaler) || rt.Implements(text) {
				t.Errorf("%s has a JSON or text marshaler; AppendJSON does not call it", rt)
			}
		}
	}
}

// TestAppendJSONEscapes pins the escapes that matter for a log line a
// workload partly controls, independently of encoding/json.
func TestAppendJSONEscapes(t *testing.T) {
	for in, want := range map[string]string{
		"":                       `""`,
		"plain":                  `"plain"`,
		`a"b\c`:                  `"a\"b\\c"`,
		"<a href='x'>&</a>":      `"\u003ca href='x'\u003e\u0026\u003c/a\u003e"`,
		"l1\nl2\r\t\b\f\x00\x1f": `"l1\nl2\r\t\b\f\u0000\u001f"`,
		"\u2028\u2029\x7f":       "\"\\u2028\\u2029\x7f\"",
		"bad\xffutf8\xc3":        `"bad\ufffdutf8\ufffd"`,
		"ünï😀":                   `"ünï😀"`,
	} {
		if got := string(appendString(nil, in)); got != want {
			t.Errorf("appendString(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestAppendStringEveryByteAnywhere: each byte value, and a few runes, at
// each position of a string is written as encoding/json writes it.
func TestAppendStringEveryByteAnywhere(t *testing.T) {
	base := "abcdefghijklmnopqrst"
	var odd []string
	for c := range 256 {
		odd = append(odd, string([]byte{byte(c)}))
	}
	odd = append(odd, "\u2028", "\u2029", "é", "😀", "\xc3")
	for _, o := range odd {
		for i := 0; i <= len(base); i++ {
			in := base[:i] + o + base[i:]
			want, err := json.Marshal(in)
			if err != nil {
				t.Fatal(err)
			}
			if got := appendString(nil, in); !bytes.Equal(got, want) {
				t.Fatalf("appendString(%q) = %s, want %s", in, got, want)
			}
		}
	}
}

// BenchmarkAppendJSON compares the encoder with json.Marshal on the
// boundary's two common events.
func BenchmarkAppendJSON(b *testing.B) {
	for _, bc := range []struct {
		name string
		e    Event
	}{{"dns", benchDNSEvent()}, {"net", benchNetEvent(true)}} {
		b.Run(bc.name+"/append", func(b *testing.B) {
			b.ReportAllocs()
			var buf []byte
			for b.Loop() {
				buf = bc.e.AppendJSON(buf[:0])
			}
		})
		b.Run(bc.name+"/marshal", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := json.Marshal(&bc.e); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
