package procs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// Defaults of the scaler's thresholds (see the package comment).
const (
	// Window is how often the scaler samples and decides.
	Window = 250 * time.Millisecond
	// SlowWait is the scheduling wait counted as slow.
	SlowWait = 100 * time.Microsecond
	// UpFraction: more slow waits than this in a window scale up.
	UpFraction = 0.10
	// DownFraction: a window with fewer slow waits than this is quiet.
	DownFraction = 0.05
	// UpCPU: a window where one processor ran more than this share of the
	// window scales up (work that waits for nothing but the processor).
	UpCPU = 0.90
	// MinEvents: in a window with fewer recorded scheduling waits, the
	// share of slow ones is not judged (the CPU rule still is).
	MinEvents = 100
	// HoldMin and HoldMax bound how long quiet windows must last before
	// the scaler goes back to one processor.
	HoldMin = time.Second
	HoldMax = time.Minute
	// UpIdle: slow waits scale up only when the CPUs the process may run
	// on were idle at least this many CPUs' worth (a second processor has
	// somewhere to run; without it the processors only compete with the
	// rest of the machine for the same CPUs), averaged over the last
	// windows (IdleWeight) so one window's dip in the load does not count.
	UpIdle = 0.5
	// IdleWeight is the weight of the newest window in that average.
	IdleWeight = 0.5
	// DownIdle: at all processors, a window where those CPUs were idle
	// less than this many CPUs' worth, while the process used less than
	// UpCPU of one CPU, counts as quiet (the work fits one processor and
	// the machine has no room for more).
	DownIdle = 0.25
	// TrialWindows: after a return to all processors, when the process
	// counts its work (WithWork), the rate of this many windows at all of
	// them is compared with the rate of the window at one that asked for
	// more.
	TrialWindows = 4
	// TrialGain: a trial whose rate is below this multiple of the rate at
	// one processor found no gain: back to one, and no return to all
	// before the block (TrialBlock) has passed.
	TrialGain = 1.05
	// TrialCPU: a trial in which the process used at least this many CPUs
	// on average gained too, whatever its count of work: it ran work
	// side by side that the count does not see (a tunnel's bytes, a
	// supervisor's exec streams).
	TrialCPU = 1.25
	// TrialBlock is how long a trial without gain keeps one processor; it
	// doubles with each such trial in a row, up to HoldMax.
	TrialBlock = 10 * time.Second
)

// Sample is what one window saw: scheduling events, those that waited
// longer than SlowWait, the process's CPU time (user and system) and,
// when IdleKnown, the idle time of the CPUs it may run on (summed over
// them: two CPUs idle for a whole window are twice its length) and
// which CPUs those were.
type Sample struct {
	Events, Slow uint64
	CPU          time.Duration
	Idle         time.Duration
	IdleKnown    bool
	CPUs         unix.CPUSet
	// Work is the units of work the process has done (connections and
	// queries, WithWork), when WorkKnown.
	Work      uint64
	WorkKnown bool
}

// since is the window from an earlier total p to s. The idle is known
// only when both totals are over the same CPUs (an affinity or cpuset
// change, a CPU going on- or offline, would count a CPU's idle since
// boot, or take it away).
func (s Sample) since(p Sample) Sample {
	return Sample{Events: s.Events - p.Events, Slow: s.Slow - p.Slow, CPU: s.CPU - p.CPU,
		Idle: s.Idle - p.Idle, IdleKnown: s.IdleKnown && p.IdleKnown && s.CPUs == p.CPUs, CPUs: s.CPUs,
		Work: s.Work - p.Work, WorkKnown: s.WorkKnown && p.WorkKnown}
}

// Sampler reads the process's totals since it started; the scaler takes
// differences between windows.
type Sampler interface {
	Read() (Sample, error)
}

// State is the scaler's memory between windows.
type State struct {
	Procs int           // processors now
	Max   int           // the most it uses
	Quiet time.Duration // how long the windows have been quiet at Max
	Hold  time.Duration // how long they must be before one processor
	Down  time.Time     // when it last went to one processor (zero: never)
	// Idle is the idle CPUs averaged over the windows (IdleWeight), once
	// IdleSeen.
	Idle     float64
	IdleSeen bool
	// Trial is the trial of all processors under way (see TrialWindows);
	// its Rate is 0 when none is (against no work at one processor, all
	// of them gain anyway).
	Trial Trial
	// Blocked: a trial found no gain, so no return to all processors
	// before this; BlockFor is how long the next such block lasts.
	Blocked  time.Time
	BlockFor time.Duration
}

// Trial is a trial of all processors: the work rate of the window at one
// that asked for more, and what the windows at all of them have seen so
// far.
type Trial struct {
	Rate    float64 // work a second at one processor
	Windows int     // windows at all processors so far
	Work    uint64
	CPU     time.Duration
	Time    time.Duration
}

// add counts a window at all processors; true when it was the last of the
// trial.
func (t *Trial) add(w Sample, length time.Duration) bool {
	t.Windows++
	t.Work, t.CPU, t.Time = t.Work+w.Work, t.CPU+w.CPU, t.Time+length
	return t.Windows >= TrialWindows
}

// gained: all processors did TrialGain times the work of one, or ran
// TrialCPU CPUs' worth of work the count does not see.
func (t *Trial) gained() bool {
	return float64(t.Work)/t.Time.Seconds() >= TrialGain*t.Rate ||
		float64(t.CPU)/float64(t.Time) >= TrialCPU
}

// Decide returns the state after the window that just ended (its length
// and what it saw); its Procs are the processors for the next window,
// 1 or st.Max.
func Decide(st State, w Sample, length time.Duration, now time.Time) State {
	if st.Hold <= 0 {
		st.Hold = HoldMin
	}
	if length <= 0 {
		return st
	}
	// The share of slow waits needs enough waits to mean anything; the
	// CPU time does not (work that waits for nothing but the processor
	// makes few scheduling events, and the runtime records a sample of
	// them).
	judged := w.Events >= MinEvents
	slow := 0.0
	if judged {
		slow = float64(w.Slow) / float64(w.Events)
	}
	cpu := float64(w.CPU) / float64(length)
	// Idle CPUs over the window and on average; an idle never known
	// gates nothing (as before the idle was read), a window of unknown
	// idle leaves the average as it was. (since already refuses totals
	// over different CPUs; iowait may step back a little, hence the 0.)
	idle := max(float64(w.Idle)/float64(length), 0)
	if w.IdleKnown {
		if st.IdleSeen {
			st.Idle = IdleWeight*idle + (1-IdleWeight)*st.Idle
		} else {
			st.Idle, st.IdleSeen = idle, true
		}
	}
	spare := !st.IdleSeen || st.Idle >= UpIdle
	crowded := w.IdleKnown && idle < DownIdle && cpu < UpCPU
	switch {
	case st.Procs < st.Max:
		if now.Before(st.Blocked) {
			break // a trial of all processors found no gain: not yet
		}
		if (slow > UpFraction && spare) || cpu > UpCPU*float64(st.Procs) {
			// Back to all of them. Soon after a return to one, the quiet
			// run needed next time doubles; after a long stay at one it
			// starts over.
			if !st.Down.IsZero() && now.Sub(st.Down) < 2*st.Hold {
				st.Hold = min(2*st.Hold, HoldMax)
			} else {
				st.Hold = HoldMin
			}
			st.Procs, st.Quiet = st.Max, 0
			// With the work counted, all processors are on trial: they
			// stay only if they do more of it or run more than a CPU's
			// worth (a load that comes one piece after another, as DNS
			// queries from one read loop, waits for one processor now
			// and then, and two only add hand-offs between threads).
			st.Trial = Trial{}
			if w.WorkKnown {
				st.Trial.Rate = float64(w.Work) / length.Seconds()
			}
		}
	default:
		if st.Trial.Rate > 0 && w.WorkKnown && st.Trial.add(w, length) {
			gained := st.Trial.gained()
			st.Trial = Trial{}
			if !gained {
				st.BlockFor = min(max(2*st.BlockFor, TrialBlock), HoldMax)
				st.Procs, st.Quiet, st.Down, st.Blocked = 1, 0, now, now.Add(st.BlockFor)
				return st
			}
			st.BlockFor = 0 // a gain: the next block starts over
		}
		if !judged && !crowded {
			break // too little seen to judge: the quiet run neither grows nor ends
		}
		if slow >= DownFraction && !crowded {
			st.Quiet = 0
			break
		}
		st.Quiet += length
		if st.Quiet >= st.Hold {
			st.Procs, st.Quiet, st.Down, st.Trial = 1, 0, now, Trial{}
		}
	}
	return st
}

// Scaler runs Decide every window and applies it.
type Scaler struct {
	log    zerolog.Logger
	sample Sampler
	set    func(int) int
	reset  func() int
	window time.Duration
	now    func() time.Time
	tick   func(time.Duration) (<-chan time.Time, func())
	work   func() uint64
}

// Option configures a Scaler.
type Option func(*Scaler)

// WithSampler replaces the runtime's metrics and getrusage.
func WithSampler(s Sampler) Option { return func(c *Scaler) { c.sample = s } }

// WithSetter replaces runtime.GOMAXPROCS (set) and the return to the
// runtime's default (reset: runtime.SetDefaultGOMAXPROCS, then the count
// it chose).
func WithSetter(set func(int) int, reset func() int) Option {
	return func(c *Scaler) { c.set, c.reset = set, reset }
}

// WithClock replaces time.Now and the window's ticker.
func WithClock(now func() time.Time, tick func(time.Duration) (<-chan time.Time, func())) Option {
	return func(c *Scaler) { c.now, c.tick = now, tick }
}

// WithWork gives the scaler the process's count of work done (a
// boundary's connections and queries): a return to all processors then
// stays only while they do more of it than one did (TrialWindows).
func WithWork(count func() uint64) Option { return func(c *Scaler) { c.work = count } }

// WithWindow replaces Window.
func WithWindow(d time.Duration) Option { return func(c *Scaler) { c.window = d } }

// New returns a scaler logging its changes (at debug) to log.
func New(log zerolog.Logger, opts ...Option) *Scaler {
	s := &Scaler{log: log, sample: runtimeSampler{stat: "/proc/stat"}, set: runtime.GOMAXPROCS, reset: defaultProcs, window: Window, now: time.Now,
		tick: func(d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(d)
			return t.C, t.Stop
		}}
	for _, o := range opts {
		o(s)
	}
	return s
}

// defaultProcs hands GOMAXPROCS back to the runtime (which then follows
// the CPUs, the affinity mask and a cgroup's CPU limit again) and returns
// the count it chose.
func defaultProcs() int {
	runtime.SetDefaultGOMAXPROCS()
	return runtime.GOMAXPROCS(0)
}

// Run scales until ctx ends, then hands the count back to the runtime.
// Setting one processor stops the runtime's own updates of the count
// (from a cgroup's CPU limit or the affinity mask); each return to all
// of them, and the end, hand it back, so "all" is the runtime's default
// at that moment.
func (s *Scaler) Run(ctx context.Context) {
	all := s.set(0)
	if all <= 1 {
		s.log.Debug().Int("procs", all).Msg("go processor scaling off: one processor to begin with")
		return
	}
	defer s.reset()
	st := State{Procs: all, Max: all}
	prev, err := s.read()
	if err != nil {
		s.log.Warn().Err(err).Msg("go processor scaling off")
		return
	}
	s.log.Debug().Int("max", all).Dur("window", s.window).Bool("idle_known", prev.IdleKnown).
		Msg("go processor scaling on: between 1 and max with the load (idle_known false: slow waits scale up without the idle CPUs' gate)")
	last := s.now()
	ticks, stop := s.tick(s.window)
	defer stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticks:
		}
		cur, err := s.read()
		if err != nil {
			s.log.Warn().Err(err).Msg("go processor scaling off")
			return
		}
		now := s.now()
		w := cur.since(prev)
		next := Decide(st, w, now.Sub(last), now)
		if next.Procs != st.Procs {
			if next.Procs == st.Max {
				n := s.reset()
				next.Procs, next.Max = n, n
			} else {
				s.set(next.Procs)
			}
			s.log.Debug().Int("from", st.Procs).Int("to", next.Procs).Uint64("events", w.Events).Uint64("slow", w.Slow).
				Dur("cpu", w.CPU).Dur("idle", w.Idle).Bool("idle_known", w.IdleKnown).Uint64("work", w.Work).
				Bool("trial_no_gain", next.Procs < st.Procs && !next.Blocked.IsZero() && next.Blocked != st.Blocked).
				Dur("hold", next.Hold).Msg("go processors scaled")
		}
		st, prev, last = next, cur, now
	}
}

// read takes the sampler's totals and the work done.
func (s *Scaler) read() (Sample, error) {
	t, err := s.sample.Read()
	if err == nil && s.work != nil {
		t.Work, t.WorkKnown = s.work(), true
	}
	return t, err
}

// runtimeSampler reads /sched/latencies:seconds, getrusage(RUSAGE_SELF)
// and the idle time of the process's CPUs in stat (/proc/stat).
type runtimeSampler struct{ stat string }

const schedLatencies = "/sched/latencies:seconds"

var errNoLatencies = errors.New("procs: runtime/metrics has no " + schedLatencies + " histogram")

func (r runtimeSampler) Read() (Sample, error) {
	m := []metrics.Sample{{Name: schedLatencies}}
	metrics.Read(m)
	if m[0].Value.Kind() != metrics.KindFloat64Histogram {
		return Sample{}, errNoLatencies
	}
	h := m[0].Value.Float64Histogram()
	var s Sample
	for i, c := range h.Counts {
		s.Events += c
		if h.Buckets[i] >= SlowWait.Seconds() {
			s.Slow += c
		}
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return Sample{}, fmt.Errorf("procs: getrusage: %w", err)
	}
	s.CPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	// Without the idle time the scaler decides as it did before it read
	// it (the slow waits alone).
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) == nil {
		if b, err := os.ReadFile(r.stat); err == nil {
			s.Idle, s.IdleKnown = idleOf(b, &set)
			s.CPUs = set
		}
	}
	return s, nil
}

// statTick is the unit of /proc/stat's times: USER_HZ, 100 on every
// architecture Go runs Linux on (x86, arm64, riscv64, ppc64, s390x,
// loong64, mips).
const statTick = 10 * time.Millisecond

// idleOf sums the idle and iowait times of stat's "cpuN" lines for the
// CPUs in set (iowait is idle time: the CPU could run a thread); ok is
// false unless every CPU of set has a line that parses.
func idleOf(stat []byte, set *unix.CPUSet) (idle time.Duration, ok bool) {
	seen := 0
	for line := range bytes.Lines(stat) {
		f := bytes.Fields(line)
		if len(f) < 6 || !bytes.HasPrefix(f[0], []byte("cpu")) {
			continue
		}
		n, err := strconv.Atoi(string(f[0][3:])) // the aggregate "cpu" line fails here
		if err != nil || !set.IsSet(n) {
			continue
		}
		idleT, err1 := strconv.ParseUint(string(f[4]), 10, 64)
		ioT, err2 := strconv.ParseUint(string(f[5]), 10, 64)
		if err1 != nil || err2 != nil {
			return 0, false
		}
		idle += time.Duration(idleT+ioT) * statTick
		seen++
	}
	return idle, seen > 0 && seen == set.Count()
}

// Start runs a scaler in the background when Enabled, until the returned
// stop is called; stop waits for it to have handed the count back.
func Start(ctx context.Context, log zerolog.Logger, opts ...Option) (stop func()) {
	if v, set := os.LookupEnv("GOMAXPROCS"); set {
		log.Debug().Str("GOMAXPROCS", v).Msg("go processor scaling off: GOMAXPROCS is set in the environment")
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		New(log, opts...).Run(ctx)
	}()
	return func() { cancel(); <-done }
}
