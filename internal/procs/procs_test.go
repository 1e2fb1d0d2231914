package procs

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

var t0 = time.Date(2026, 12, 2, 17, 0, 0, 0, time.UTC)

// window returns a window's sample: n events, a share slow of them, and
// cpu of one processor's time over Window.
func window(n uint64, slow float64, cpu float64) Sample {
	return Sample{Events: n, Slow: uint64(float64(n) * slow), CPU: time.Duration(cpu * float64(Window))}
}

// quiet is a window of one client at a time on two processors.
func quiet() Sample { return window(800, 0.02, 0.7) }

// almostDown feeds quiet windows to st (at two processors) until one more
// would end the hold, checking that none ends it early; it returns the
// state and the time of the last window.
func almostDown(t *testing.T, st State, now time.Time) (State, time.Time) {
	t.Helper()
	steps := int(HoldMin / Window)
	for i := 1; i < steps; i++ {
		now = now.Add(Window)
		if st = Decide(st, quiet(), Window, now); st.Procs != 2 {
			t.Fatalf("window %d of %d: went to %d processors before the hold of %s", i, steps, st.Procs, HoldMin)
		}
	}
	return st, now
}

func TestDecideGoesToOneAfterAQuietHold(t *testing.T) {
	st, now := almostDown(t, State{Procs: 2, Max: 2}, t0)
	now = now.Add(Window)
	if st = Decide(st, quiet(), Window, now); st.Procs != 1 || !st.Down.Equal(now) {
		t.Fatalf("after %s of quiet windows: state %+v; want 1 processor, down at %s", HoldMin, st, now)
	}
}

func TestDecideBusyWindowResetsTheQuietRun(t *testing.T) {
	st, now := almostDown(t, State{Procs: 2, Max: 2}, t0)
	now = now.Add(Window)
	st = Decide(st, window(4000, 0.30, 1.0), Window, now) // 16 clients
	if st.Quiet != 0 || st.Procs != 2 {
		t.Fatalf("a busy window left quiet=%s procs=%d; want 0 and 2", st.Quiet, st.Procs)
	}
	now = now.Add(Window)
	if st = Decide(st, quiet(), Window, now); st.Procs != 2 {
		t.Fatalf("one quiet window after a busy one went to %d processors", st.Procs)
	}
}

func TestDecideScalesUpOnSlowWaitsOrAFullProcessor(t *testing.T) {
	for _, tc := range []struct {
		name string
		w    Sample
		want int
	}{
		{"slow waits (16 clients at one processor: 35% over 100 µs)", window(3400, 0.35, 0.75), 4},
		{"just over the up fraction", window(1000, UpFraction+0.01, 0.2), 4},
		{"at the up fraction", window(1000, UpFraction, 0.2), 1},
		{"one processor nearly all used", window(500, 0.01, 0.95), 4},
		{"one client (2% slow, 0.65 of a processor)", window(1600, 0.02, 0.65), 1},
		{"too few events to judge the waits", window(MinEvents-1, 0.9, 0.5), 1},
		{"few events, one processor nearly all used", window(10, 0, 0.95), 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if st := Decide(State{Procs: 1, Max: 4, Down: t0}, tc.w, Window, t0.Add(time.Hour)); st.Procs != tc.want {
				t.Fatalf("got %d processors; want %d", st.Procs, tc.want)
			}
		})
	}
}

func TestDecideHoldDoublesWhenItFlaps(t *testing.T) {
	st := State{Procs: 2, Max: 2}
	now := t0
	busy := window(3000, 0.4, 0.8)
	var holds []time.Duration
	for cycle := 0; cycle < 8; cycle++ {
		for st.Procs == 2 {
			now = now.Add(Window)
			st = Decide(st, quiet(), Window, now)
		}
		now = now.Add(Window) // the next window at one processor is busy
		st = Decide(st, busy, Window, now)
		if st.Procs != 2 {
			t.Fatalf("cycle %d: a busy window at one processor left %d", cycle, st.Procs)
		}
		holds = append(holds, st.Hold)
	}
	want := []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, time.Minute, time.Minute, time.Minute}
	for i := range want {
		if holds[i] != want[i] {
			t.Fatalf("holds after each flap: %v; want %v", holds, want)
		}
	}
	// A long stay at one processor: the next return starts over.
	for st.Procs == 2 {
		now = now.Add(Window)
		st = Decide(st, quiet(), Window, now)
	}
	now = now.Add(2*st.Hold + time.Second)
	if st = Decide(st, busy, Window, now); st.Hold != HoldMin {
		t.Fatalf("after a long stay at one processor the hold is %s; want %s", st.Hold, HoldMin)
	}
}

func TestDecideWindowsWithFewEventsNeitherCountNorReset(t *testing.T) {
	st, now := almostDown(t, State{Procs: 2, Max: 2}, t0)
	before := st.Quiet
	now = now.Add(Window)
	if st = Decide(st, window(MinEvents-1, 0.5, 0.1), Window, now); st.Quiet != before || st.Procs != 2 {
		t.Fatalf("a window of %d events moved the quiet run %s -> %s (procs %d)", MinEvents-1, before, st.Quiet, st.Procs)
	}
	now = now.Add(Window)
	if st = Decide(st, quiet(), Window, now); st.Procs != 1 {
		t.Fatalf("the quiet run around a window of few events did not end at one processor (%d)", st.Procs)
	}
}

// fakeRuntime is the scaler's seams: samples fed one per tick, what the
// scaler did to the processors, and the ticker.
type fakeRuntime struct {
	mu      sync.Mutex
	procs   int // the runtime's default count
	cur     int
	did     []string
	total   Sample
	windows []Sample
	ticks   chan time.Time
	now     time.Time
	read    chan struct{}
}

func (f *fakeRuntime) Read() (Sample, error) {
	f.mu.Lock()
	if len(f.windows) > 0 && f.now.After(t0) {
		w := f.windows[0]
		f.windows = f.windows[1:]
		f.total.Events += w.Events
		f.total.Slow += w.Slow
		f.total.CPU += w.CPU
		f.total.Idle += w.Idle
		f.total.IdleKnown = w.IdleKnown
	}
	total := f.total
	f.mu.Unlock()
	f.read <- struct{}{}
	return total, nil
}

func (f *fakeRuntime) set(n int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	old := f.cur
	if n > 0 {
		f.cur = n
		f.did = append(f.did, fmt.Sprintf("set %d", n))
	}
	return old
}

func (f *fakeRuntime) reset() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cur = f.procs
	f.did = append(f.did, "reset")
	return f.cur
}

// within waits for c, failing the test after 10 s.
func within(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s within 10 s", what)
	}
}

// run starts a scaler on f's seams, feeds it n windows (calling each, if
// not nil, after the read of window i) and ends it.
func (f *fakeRuntime) run(t *testing.T, n int, each func(i int)) {
	t.Helper()
	s := New(zerolog.Nop(), WithSampler(f), WithSetter(f.set, f.reset),
		WithClock(func() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now },
			func(time.Duration) (<-chan time.Time, func()) { return f.ticks, func() {} }))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	within(t, f.read, "first read, before any window")
	for i := range n {
		f.mu.Lock()
		f.now = f.now.Add(Window)
		now := f.now
		f.mu.Unlock()
		select {
		case f.ticks <- now:
		case <-time.After(10 * time.Second):
			t.Fatalf("window %d: the scaler took no tick within 10 s", i)
		}
		within(t, f.read, "read after a tick")
		if each != nil {
			each(i)
		}
	}
	cancel()
	within(t, done, "end of Run after its context ended")
}

func TestScalerAppliesDecisionsAndHandsBack(t *testing.T) {
	f := &fakeRuntime{procs: 2, cur: 2, ticks: make(chan time.Time), now: t0, read: make(chan struct{}, 64)}
	busy := window(3000, 0.4, 0.8)
	for i := 0; i < int(HoldMin/Window); i++ {
		f.windows = append(f.windows, quiet())
	}
	f.windows = append(f.windows, busy)
	f.run(t, int(HoldMin/Window)+1, nil)
	f.mu.Lock()
	defer f.mu.Unlock()
	// One processor after the quiet hold, the runtime's default after
	// the busy window, and again at the end.
	want := []string{"set 1", "reset", "reset"}
	if fmt.Sprint(f.did) != fmt.Sprint(want) {
		t.Fatalf("the scaler did %v; want %v", f.did, want)
	}
}

func TestRuntimeSamplerReadsTheScheduler(t *testing.T) {
	a, err := runtimeSampler{stat: "/proc/stat"}.Read()
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 200 {
		wg.Add(1)
		go func() { defer wg.Done(); time.Sleep(time.Millisecond) }()
	}
	wg.Wait()
	spin := time.Now()
	for time.Since(spin) < 20*time.Millisecond { // CPU for getrusage to see
	}
	b, err := runtimeSampler{stat: "/proc/stat"}.Read()
	if err != nil {
		t.Fatal(err)
	}
	// The runtime records a sample of the scheduling events, not each.
	if b.Events <= a.Events || b.CPU <= a.CPU || b.Slow < a.Slow {
		t.Fatalf("before %+v, after 200 goroutines and 20 ms of CPU %+v: want more events and CPU", a, b)
	}
	// /proc/stat's idle times of the CPUs this test may run on.
	// (iowait, counted as idle, may step back a little: the kernel says so.)
	if !a.IdleKnown || !b.IdleKnown || b.Idle+time.Second < a.Idle || a.Idle <= 0 || a.CPUs.Count() == 0 {
		t.Fatalf("idle before %s (%v, %d CPUs), after %s (%v): want known, positive, not going back", a.Idle, a.IdleKnown, a.CPUs.Count(), b.Idle, b.IdleKnown)
	}
	if _, err := (runtimeSampler{stat: "/nonexistent/stat"}).Read(); err != nil {
		t.Fatalf("an unreadable stat file failed the sample (%v); it should only leave the idle unknown", err)
	}
	if s, _ := (runtimeSampler{stat: "/nonexistent/stat"}).Read(); s.IdleKnown {
		t.Fatal("idle known without a stat file")
	}
}

// idleWindow is window with the CPUs' idle time over it, in CPUs.
func idleWindow(n uint64, slow, cpu, idle float64) Sample {
	w := window(n, slow, cpu)
	w.Idle, w.IdleKnown = time.Duration(idle*float64(Window)), true
	return w
}

func TestDecideSlowWaitsScaleUpOnlyWithIdleCPUs(t *testing.T) {
	for _, tc := range []struct {
		name string
		w    Sample
		want int
	}{
		// 16 clients at one processor with the load generator and the
		// upstream on the same two CPUs (measured: 0.21-0.29 idle).
		{"slow waits, the machine full", idleWindow(3400, 0.35, 0.75, 0.29), 1},
		{"slow waits, just under the idle needed", idleWindow(3400, 0.35, 0.75, UpIdle-0.01), 1},
		{"slow waits, idle CPU for a second processor", idleWindow(3400, 0.35, 0.75, UpIdle), 2},
		{"slow waits, idle unknown (no /proc/stat)", window(3400, 0.35, 0.75), 2},
		{"one processor nearly all used, the machine full", idleWindow(500, 0.01, 0.95, 0), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if st := Decide(State{Procs: 1, Max: 2, Down: t0}, tc.w, Window, t0.Add(time.Hour)); st.Procs != tc.want {
				t.Fatalf("got %d processors; want %d", st.Procs, tc.want)
			}
		})
	}
}

func TestDecideCrowdedMachineGoesToOne(t *testing.T) {
	// 64 clients at two processors, the CPUs all used (measured: 0.02-0.11
	// idle, the process 0.71-0.78 of a CPU): slow waits stay high, yet the
	// windows count as quiet and the hold ends at one processor.
	crowded := idleWindow(4000, 0.45, 0.75, 0.05)
	st, now := State{Procs: 2, Max: 2}, t0
	steps := int(HoldMin / Window)
	for i := 1; i <= steps; i++ {
		now = now.Add(Window)
		st = Decide(st, crowded, Window, now)
		if want := map[bool]int{true: 1, false: 2}[i == steps]; st.Procs != want {
			t.Fatalf("crowded window %d of %d: %d processors, want %d", i, steps, st.Procs, want)
		}
	}
	// At one processor the same load leaves 0.2-0.3 CPUs idle: no return.
	for i := 0; i < 20; i++ {
		now = now.Add(Window)
		if st = Decide(st, idleWindow(3400, 0.45, 0.73, 0.25), Window, now); st.Procs != 1 {
			t.Fatalf("window %d at one processor with 0.25 CPUs idle went to %d", i, st.Procs)
		}
	}
	for _, tc := range []struct {
		name string
		w    Sample
	}{
		{"the process needs more than one CPU", idleWindow(4000, 0.45, 1.5, 0.05)},
		{"idle between the thresholds", idleWindow(4000, 0.45, 0.75, (UpIdle+DownIdle)/2)},
		{"idle unknown", window(4000, 0.45, 0.75)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, now := State{Procs: 2, Max: 2}, t0
			for i := 0; i < 4*steps; i++ {
				now = now.Add(Window)
				if st = Decide(st, tc.w, Window, now); st.Procs != 2 || st.Quiet != 0 {
					t.Fatalf("window %d: procs %d quiet %s; want 2 and no quiet run", i, st.Procs, st.Quiet)
				}
			}
		})
	}
}

func TestIdleOf(t *testing.T) {
	stat := []byte(`cpu  100 0 50 9000 30 0 5 0 0 0
cpu0 50 0 25 4000 10 0 2 0 0 0
cpu1 50 0 25 5000 20 0 3 0 0 0
cpu12 1 0 1 700 1 0 0 0 0 0
intr 12345 1 2 3
ctxt 999
`)
	var set unix.CPUSet
	set.Set(1)
	set.Set(12)
	if idle, ok := idleOf(stat, &set); !ok || idle != (5000+20+700+1)*statTick {
		t.Fatalf("cpus 1 and 12: %s %v; want %s", idle, ok, (5000+20+700+1)*statTick)
	}
	set.Zero()
	set.Set(0)
	set.Set(3)
	if _, ok := idleOf(stat, &set); ok {
		t.Fatal("CPU 3 of the mask has no line (offline): want not ok")
	}
	set.Zero()
	set.Set(0)
	if _, ok := idleOf([]byte("cpu0 1 2 3 x 5 6\n"), &set); ok {
		t.Fatal("an idle field that is not a number: want not ok")
	}
	if _, ok := idleOf([]byte("cpu  1 2 3 4 5 6\nintr 1 2\n"), &set); ok {
		t.Fatal("only the aggregate line: want not ok")
	}
}

func TestDecideIdleIsAveragedForTheUpRule(t *testing.T) {
	// At one processor with 0.3 CPUs idle on average, one window's dip in
	// the load (0.6 idle) does not scale up; a run of them does.
	st := State{Procs: 1, Max: 2, Down: t0, Idle: 0.3, IdleSeen: true}
	now := t0.Add(time.Hour)
	now = now.Add(Window)
	if st = Decide(st, idleWindow(3400, 0.35, 0.75, 0.6), Window, now); st.Procs != 1 {
		t.Fatalf("one window of 0.6 idle after 0.3 on average went to %d (average %.2f)", st.Procs, st.Idle)
	}
	now = now.Add(Window)
	if st = Decide(st, idleWindow(3400, 0.35, 0.75, 0.6), Window, now); st.Procs != 2 {
		t.Fatalf("a second window of 0.6 idle left %d processors (average %.2f)", st.Procs, st.Idle)
	}
	// The average follows the windows at all processors too.
	if st.Idle < UpIdle || st.Idle > 0.6 {
		t.Fatalf("average idle %.3f after windows of 0.6 from 0.3", st.Idle)
	}
}

func TestDecideUnknownWindowKeepsTheAverage(t *testing.T) {
	// Idle seen before (0.3 on average): a window whose idle is unknown
	// (the CPUs changed) does not open the gate.
	st := State{Procs: 1, Max: 2, Down: t0, Idle: 0.3, IdleSeen: true}
	if st = Decide(st, window(3400, 0.35, 0.75), Window, t0.Add(time.Hour)); st.Procs != 1 || st.Idle != 0.3 {
		t.Fatalf("an unknown window: %d processors, average %.2f; want 1 and 0.3", st.Procs, st.Idle)
	}
}

func TestSinceKnowsIdleOnlyOverTheSameCPUs(t *testing.T) {
	var two, three unix.CPUSet
	two.Set(0)
	two.Set(1)
	three = two
	three.Set(2)
	p := Sample{Events: 10, CPU: time.Second, Idle: 10 * time.Second, IdleKnown: true, CPUs: two}
	s := Sample{Events: 30, CPU: 2 * time.Second, Idle: 11 * time.Second, IdleKnown: true, CPUs: two}
	if w := s.since(p); !w.IdleKnown || w.Idle != time.Second || w.Events != 20 || w.CPU != time.Second || w.CPUs != two {
		t.Fatalf("same CPUs: %+v", w)
	}
	s.CPUs, s.Idle = three, 500*time.Hour // a CPU come online: its idle since boot
	if w := s.since(p); w.IdleKnown {
		t.Fatalf("a CPU added between samples: idle %s known", w.Idle)
	}
	s.CPUs, s.IdleKnown = two, false
	if w := s.since(p); w.IdleKnown {
		t.Fatal("idle unknown now, known before: want unknown")
	}
	// A window whose iowait stepped back counts as no idle, not less.
	st := Decide(State{Procs: 1, Max: 2}, Sample{Events: 1000, Slow: 10, Idle: -Window, IdleKnown: true, CPUs: two}, Window, t0)
	if st.Idle != 0 {
		t.Fatalf("a negative window's idle: average %.1f, want 0", st.Idle)
	}
}

func TestScalerUsesTheIdleOfItsWindows(t *testing.T) {
	// Through Run and since: crowded windows at two processors end at
	// one after the hold; slow waits with 0.25 CPUs idle keep it there;
	// windows with a whole CPU idle bring all back.
	f := &fakeRuntime{procs: 2, cur: 2, ticks: make(chan time.Time), now: t0, read: make(chan struct{}, 64)}
	f.total.IdleKnown = true
	hold := int(HoldMin / Window)
	for range hold {
		f.windows = append(f.windows, idleWindow(4000, 0.45, 0.75, 0.05))
	}
	for range 8 {
		f.windows = append(f.windows, idleWindow(3400, 0.45, 0.73, 0.25))
	}
	f.windows = append(f.windows, idleWindow(3400, 0.45, 0.73, 1.0), idleWindow(3400, 0.45, 0.73, 1.0))
	var seen []string
	f.run(t, hold+10, func(i int) {
		if i == hold+7 { // the windows before this one are decided (the scaler took this tick)
			f.mu.Lock()
			seen = append(seen, f.did...)
			f.mu.Unlock()
		}
	})
	f.mu.Lock()
	defer f.mu.Unlock()
	if fmt.Sprint(seen) != "[set 1]" {
		t.Fatalf("after the crowded hold and the windows at 0.25 idle the scaler did %v; want [set 1]", seen)
	}
	if want := []string{"set 1", "reset", "reset"}; fmt.Sprint(f.did) != fmt.Sprint(want) {
		t.Fatalf("the scaler did %v; want %v", f.did, want)
	}
}

// counted is a window of n events, a share slow of them, cpu of one
// processor and work units done, with the work counted.
func counted(n uint64, slow, cpu float64, work uint64) Sample {
	w := window(n, slow, cpu)
	w.Work, w.WorkKnown = work, true
	return w
}

// TestDecideTrialWithoutGainGoesBackAndBlocks: a DNS load at one
// processor waits for it now and then (slow waits, idle CPUs beside it)
// and scales up; at two it does less work than at one (hand-offs between
// threads), so after TrialWindows it goes back to one, and slow waits do
// not scale it up again before the block has passed; a second trial
// without gain blocks twice as long.
func TestDecideTrialWithoutGainGoesBackAndBlocks(t *testing.T) {
	dns1 := counted(900, 0.45, 0.98, 50_000) // one processor: 200k/s
	dns1.Idle, dns1.IdleKnown = Window*6/10, true
	dns2 := counted(1600, 0.15, 0.99, 42_000) // two: 168k/s
	st := State{Procs: 1, Max: 2}
	now := t0
	block := TrialBlock
	for trial := range 2 {
		now = now.Add(Window)
		if st = Decide(st, dns1, Window, now); st.Procs != 2 || st.Trial.Rate == 0 {
			t.Fatalf("trial %d: slow waits with idle CPUs: %+v; want two processors on trial", trial, st)
		}
		for i := 1; i <= TrialWindows; i++ {
			now = now.Add(Window)
			st = Decide(st, dns2, Window, now)
			if i < TrialWindows && st.Procs != 2 {
				t.Fatalf("trial %d: back to %d after %d of %d windows", trial, st.Procs, i, TrialWindows)
			}
		}
		if st.Procs != 1 || !st.Blocked.Equal(now.Add(block)) {
			t.Fatalf("trial %d without gain: %+v; want one processor blocked until %s", trial, st, now.Add(block))
		}
		for now.Add(Window).Before(st.Blocked) {
			now = now.Add(Window)
			if st = Decide(st, dns1, Window, now); st.Procs != 1 {
				t.Fatalf("trial %d: scaled up %s before the block ended", trial, st.Blocked.Sub(now))
			}
		}
		now = st.Blocked
		block *= 2
	}
}

// TestDecideTrialWithGainStays: a load that does more at two processors
// keeps them, and the next block starts over.
func TestDecideTrialWithGainStays(t *testing.T) {
	busy := counted(3000, 0.35, 0.95, 1_500)
	st := State{Procs: 1, Max: 2, BlockFor: 4 * TrialBlock}
	now := t0.Add(time.Hour)
	st = Decide(st, busy, Window, now)
	if st.Procs != 2 {
		t.Fatalf("busy window at one processor: %+v", st)
	}
	more := counted(5000, 0.05, 1.4, 1_700) // 13% more work
	for range TrialWindows + 2 {
		now = now.Add(Window)
		if st = Decide(st, more, Window, now); st.Procs != 2 {
			t.Fatalf("a trial with gain went back to %d: %+v", st.Procs, st)
		}
	}
	if st.Trial != (Trial{}) || st.BlockFor != 0 {
		t.Fatalf("after the trial: %+v; want it over and the block reset", st)
	}
}

// TestDecideWithoutWorkNoTrial: without the work counted the scaler
// decides as before (all processors stay until the quiet hold).
func TestDecideWithoutWorkNoTrial(t *testing.T) {
	st := Decide(State{Procs: 1, Max: 2}, window(3000, 0.35, 0.95), Window, t0.Add(time.Hour))
	if st.Procs != 2 || st.Trial != (Trial{}) {
		t.Fatalf("%+v; want two processors, no trial", st)
	}
	now := t0.Add(time.Hour)
	for range 3 * TrialWindows {
		now = now.Add(Window)
		if st = Decide(st, window(3000, 0.35, 1.0), Window, now); st.Procs != 2 {
			t.Fatalf("went back to %d without a trial", st.Procs)
		}
	}
}

// TestDecideTrialKeepsParallelWorkItCannotCount: work the count does not
// see (bulk tunnels' bytes, exec streams) runs side by side at all
// processors: the same count of connections, more than 1.25 CPUs used,
// and all processors stay.
func TestDecideTrialKeepsParallelWorkItCannotCount(t *testing.T) {
	st := Decide(State{Procs: 1, Max: 4}, counted(400, 0.3, 0.97, 10), Window, t0.Add(time.Hour))
	if st.Procs != 4 || st.Trial.Rate == 0 {
		t.Fatalf("%+v; want four processors on trial", st)
	}
	now := t0.Add(time.Hour)
	for range TrialWindows + 2 {
		now = now.Add(Window)
		if st = Decide(st, counted(900, 0.05, 1.8, 10), Window, now); st.Procs != 4 {
			t.Fatalf("work side by side (1.8 CPUs, the same count) went back to %d: %+v", st.Procs, st)
		}
	}
}
