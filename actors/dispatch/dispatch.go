// Package dispatch owns how actor mailboxes get a goroutine to run on. The
// protoactor default starts a fresh goroutine for every mailbox run; a
// per-connection or per-query actor then pays goroutine creation and, worse,
// stack growth through the same deep call chain on every run. Pool keeps
// warm workers (their stacks already grown) and falls back to a fresh
// goroutine when every worker is busy, so a blocking actor never starves
// the others.
package dispatch

import (
	"sync"
	"time"
)

// Pool is an elastic worker pool implementing actor.Dispatcher.
//
// An idle worker waits on a channel of its own, in a stack (the most
// recently busy on top: its stack and caches are the warmest): a job
// is handed to one worker with a plain send, and the worker waits with a
// plain receive. One shared channel that every idle worker selected on,
// each with an idle timer and a quit channel beside it, cost a
// three-way select per job (sellock of three channels) in every mailbox
// run. Idle workers retire through one timer per pool, not one per
// worker.
type Pool struct {
	throughput int
	idle       time.Duration
	max        int

	mu      sync.Mutex
	waiting []idleWorker // the idle workers, oldest first
	workers int          // busy and idle
	closed  bool
	reaper  *time.Timer // retires the workers idle past idle; nil until needed
	armed   bool        // reaper will fire
}

// idleWorker is a worker waiting for a job, and since when.
type idleWorker struct {
	jobs  chan func() // buffered 1: a hand-off never blocks; nil retires it
	since time.Time
}

// NewPool returns a pool keeping at most max warm workers; a worker idle
// for idle exits (the pool's timer retires it). throughput is how many
// messages a mailbox processes per run before yielding (protoactor's
// default is 300).
func NewPool(max int, idle time.Duration, throughput int) *Pool {
	return &Pool{throughput: throughput, idle: idle, max: max}
}

// Schedule runs fn on an idle warm worker, or on a new worker when the pool
// is below max, or else on a fresh goroutine.
func (p *Pool) Schedule(fn func()) {
	p.mu.Lock()
	if n := len(p.waiting); n > 0 {
		w := p.waiting[n-1]
		p.waiting[n-1] = idleWorker{}
		p.waiting = p.waiting[:n-1]
		p.mu.Unlock()
		w.jobs <- fn
		return
	}
	if p.workers < p.max && !p.closed {
		p.workers++
		p.mu.Unlock()
		go p.worker(make(chan func(), 1), fn)
		return
	}
	p.mu.Unlock()
	go fn()
}

// Throughput implements actor.Dispatcher.
func (p *Pool) Throughput() int { return p.throughput }

// Workers returns the number of warm workers (for tests).
func (p *Pool) Workers() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.workers
}

// worker runs fn, then each job handed to it, until it is retired (a nil
// job) or finds the pool closed.
func (p *Pool) worker(jobs chan func(), fn func()) {
	for fn != nil {
		fn()
		if !p.wait(jobs) {
			return
		}
		fn = <-jobs
	}
}

// wait puts a worker that finished its job on the idle stack; false when
// the pool is closed (the worker exits).
func (p *Pool) wait(jobs chan func()) bool {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		p.workers--
		return false
	}
	p.waiting = append(p.waiting, idleWorker{jobs: jobs, since: now})
	if !p.armed {
		p.armed = true
		if p.reaper == nil {
			p.reaper = time.AfterFunc(p.idle, p.reap)
		} else {
			p.reaper.Reset(p.idle)
		}
	}
	return true
}

// reap retires the workers idle for idle or longer (the oldest, at the
// bottom of the stack), and fires again when the oldest left would be.
func (p *Pool) reap() {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for n < len(p.waiting) && now.Sub(p.waiting[n].since) >= p.idle {
		p.waiting[n].jobs <- nil
		n++
	}
	p.workers -= n
	rest := copy(p.waiting, p.waiting[n:])
	clear(p.waiting[rest:])
	p.waiting = p.waiting[:rest]
	p.armed = rest > 0 && !p.closed
	if p.armed {
		p.reaper.Reset(p.waiting[0].since.Add(p.idle).Sub(now))
	}
}

// Close retires the idle workers; busy ones exit when their job returns.
// Schedule still runs work after Close, on fresh goroutines.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	for _, w := range p.waiting {
		w.jobs <- nil
	}
	p.workers -= len(p.waiting)
	p.waiting = nil
	if p.reaper != nil {
		p.reaper.Stop()
	}
	p.armed = false
}
