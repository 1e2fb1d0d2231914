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
type Pool struct {
	work       chan func()
	throughput int
	idle       time.Duration
	max        int
	quit       chan struct{}
	mu         sync.Mutex
	workers    int
	closed     bool
}

// NewPool returns a pool keeping at most max warm workers; a worker idle
// for between idle and twice idle exits. throughput is how many messages a
// mailbox processes per run before yielding (protoactor's default is 300).
func NewPool(max int, idle time.Duration, throughput int) *Pool {
	return &Pool{work: make(chan func()), quit: make(chan struct{}), throughput: throughput, idle: idle, max: max}
}

// Schedule runs fn on an idle warm worker, or on a new worker when the pool
// is below max, or else on a fresh goroutine.
func (p *Pool) Schedule(fn func()) {
	select {
	case p.work <- fn:
		return
	default:
	}
	p.mu.Lock()
	if p.workers < p.max && !p.closed {
		p.workers++
		p.mu.Unlock()
		go p.worker(fn)
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

// worker runs fn and then whatever work comes, and retires after idle to
// twice idle without work. Its timer is not reset per job (two timer
// operations per mailbox run): when it fires, a worker that has run
// anything since the last firing re-arms it and stays.
func (p *Pool) worker(fn func()) {
	t := time.NewTimer(p.idle)
	defer t.Stop()
	for {
		fn()
		busy := true
	wait:
		select {
		case fn = <-p.work:
			continue
		case <-t.C:
			if busy {
				busy = false
				t.Reset(p.idle)
				goto wait
			}
			p.retire()
			return
		case <-p.quit:
			p.retire()
			return
		}
	}
}

func (p *Pool) retire() {
	p.mu.Lock()
	p.workers--
	p.mu.Unlock()
}

// Close makes idle workers exit; later work runs on fresh goroutines.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		close(p.quit)
	}
}
