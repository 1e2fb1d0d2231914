package procs

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

var t0 = time.Date(2026, 12, 2, 17, 0, 0, 0, time.UTC)

// window returns a window's sample: n events, a share slow of them, and
// cpu of one processor's time over Window.
func window(n uint64, slow float64, cpu float64) Sample {
	return Sample{Events: n, Slow: uint64(float64(n) * slow), CPU: time.Duration(cpu * float64(Window))}
}

func TestDecideGoesToOneAfterAQuietHold(t *testing.T) {
	st := State{Procs: 2, Max: 2}
	now := t0
	quiet := window(800, 0.02, 0.7) // one client at a time, two processors
	steps := int(HoldMin / Window)
	for i := 1; i < steps; i++ {
		now = now.Add(Window)
		var n int
		n, st = Decide(st, quiet, Window, now)
		if n != 2 {
			t.Fatalf("window %d of %d: went to %d processors before the hold of %s", i, steps, n, HoldMin)
		}
	}
	now = now.Add(Window)
	n, st := Decide(st, quiet, Window, now)
	if n != 1 || st.Procs != 1 || !st.Down.Equal(now) {
		t.Fatalf("after %s of quiet windows: %d processors, state %+v; want 1", HoldMin, n, st)
	}
}

func TestDecideBusyWindowResetsTheQuietRun(t *testing.T) {
	st := State{Procs: 2, Max: 2}
	now := t0
	for i := 0; i < int(HoldMin/Window)-1; i++ {
		now = now.Add(Window)
		_, st = Decide(st, window(800, 0.01, 0.5), Window, now)
	}
	now = now.Add(Window)
	_, st = Decide(st, window(4000, 0.30, 1.0), Window, now) // 16 clients
	if st.Quiet != 0 || st.Procs != 2 {
		t.Fatalf("a busy window left quiet=%s procs=%d; want 0 and 2", st.Quiet, st.Procs)
	}
	now = now.Add(Window)
	if n, _ := Decide(st, window(800, 0.01, 0.5), Window, now); n != 2 {
		t.Fatalf("one quiet window after a busy one went to %d processors", n)
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
		{"too few events to judge", window(MinEvents-1, 0.9, 0.99), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, st := Decide(State{Procs: 1, Max: 4, Down: t0}, tc.w, Window, t0.Add(time.Hour))
			if n != tc.want || st.Procs != tc.want {
				t.Fatalf("got %d processors (state %d); want %d", n, st.Procs, tc.want)
			}
		})
	}
}

func TestDecideHoldDoublesWhenItFlaps(t *testing.T) {
	st := State{Procs: 2, Max: 2}
	now := t0
	quiet, busy := window(800, 0.01, 0.6), window(3000, 0.4, 0.8)
	var holds []time.Duration
	for cycle := 0; cycle < 8; cycle++ {
		for st.Procs == 2 {
			now = now.Add(Window)
			_, st = Decide(st, quiet, Window, now)
		}
		now = now.Add(Window) // the next window at one processor is busy
		_, st = Decide(st, busy, Window, now)
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
		_, st = Decide(st, quiet, Window, now)
	}
	now = now.Add(2*st.Hold + time.Second)
	if _, st = Decide(st, busy, Window, now); st.Hold != HoldMin {
		t.Fatalf("after a long stay at one processor the hold is %s; want %s", st.Hold, HoldMin)
	}
}

// fakeRuntime is the scaler's seams: samples fed one per tick, the
// processors set, and the ticker.
type fakeRuntime struct {
	mu      sync.Mutex
	procs   int
	set     []int
	total   Sample
	windows []Sample
	ticks   chan time.Time
	now     time.Time
	read    chan struct{}
}

func (f *fakeRuntime) Read() (Sample, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.windows) > 0 && f.now.After(t0) {
		w := f.windows[0]
		f.windows = f.windows[1:]
		f.total.Events += w.Events
		f.total.Slow += w.Slow
		f.total.CPU += w.CPU
	}
	defer func() { f.read <- struct{}{} }()
	return f.total, nil
}

func (f *fakeRuntime) setProcs(n int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	old := f.procs
	if n > 0 {
		f.procs = n
		f.set = append(f.set, n)
	}
	return old
}

func TestScalerAppliesDecisionsAndRestores(t *testing.T) {
	f := &fakeRuntime{procs: 2, ticks: make(chan time.Time), now: t0, read: make(chan struct{}, 64)}
	quiet, busy := window(800, 0.01, 0.6), window(3000, 0.4, 0.8)
	for i := 0; i < int(HoldMin/Window); i++ {
		f.windows = append(f.windows, quiet)
	}
	f.windows = append(f.windows, busy)
	s := New(zerolog.Nop(), WithSampler(f), WithSetter(f.setProcs),
		WithClock(func() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now },
			func(time.Duration) (<-chan time.Time, func()) { return f.ticks, func() {} }))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	<-f.read // the first read, before any window
	for i := 0; i < int(HoldMin/Window)+1; i++ {
		f.mu.Lock()
		f.now = f.now.Add(Window)
		f.mu.Unlock()
		f.ticks <- f.now
		<-f.read
	}
	cancel()
	<-done
	f.mu.Lock()
	defer f.mu.Unlock()
	// The last window's decision is applied before Run sees the cancel:
	// wait for Run to have ended (done) before reading what it set.
	want := []int{1, 2, 2} // one after the quiet hold, all after the busy window, all again on exit
	if len(f.set) != len(want) {
		t.Fatalf("set %v; want %v", f.set, want)
	}
	for i := range want {
		if f.set[i] != want[i] {
			t.Fatalf("set %v; want %v", f.set, want)
		}
	}
}

func TestRuntimeSamplerReadsTheScheduler(t *testing.T) {
	a, err := runtimeSampler{}.Read()
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
	b, err := runtimeSampler{}.Read()
	if err != nil {
		t.Fatal(err)
	}
	// The runtime records a sample of the scheduling events, not each.
	if b.Events <= a.Events || b.CPU <= a.CPU || b.Slow < a.Slow {
		t.Fatalf("before %+v, after 200 goroutines and 20 ms of CPU %+v: want more events and CPU", a, b)
	}
}

func TestEnabledRespectsTheOperator(t *testing.T) {
	t.Setenv("GOMAXPROCS", "2")
	if Enabled() {
		t.Fatal("Enabled with GOMAXPROCS set in the environment")
	}
}
