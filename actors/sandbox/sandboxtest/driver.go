package sandboxtest

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/stockade-dev/stockade/driver"
	"github.com/stockade-dev/stockade/sandbox/idrange"
)

// Driver is a fake driver.Driver: Start returns a Proc (a Go value, no
// process), Adopt finds a live one by pid, Remove records its call.
type Driver struct {
	// Root is where Workspace paths point (the actor creates them).
	Root string

	mu        sync.Mutex
	nextPid   int
	procs     []*Proc
	startErrs []error
	removed   []Removal
	removeErr error
	hold      bool
}

// Removal is one call of Remove.
type Removal struct {
	Name, UID     string
	KeepWorkspace bool
}

var _ driver.Driver = (*Driver)(nil)

// NewDriver returns a fake driver with workspaces under root.
func NewDriver(root string) *Driver { return &Driver{Root: root, nextPid: 1000} }

// FailNextStart makes the next Start fail with err.
func (d *Driver) FailNextStart(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.startErrs = append(d.startErrs, err)
}

// HoldStops makes every Proc started from now on ignore Stop until
// released (Proc.Release), or until the Stop's deadline.
func (d *Driver) HoldStops(hold bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.hold = hold
}

// FailRemove makes Remove fail with err (nil: succeed).
func (d *Driver) FailRemove(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.removeErr = err
}

// Start implements driver.Driver.
func (d *Driver) Start(ctx context.Context, l driver.Launch) (driver.Proc, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.startErrs) > 0 {
		err := d.startErrs[0]
		d.startErrs = d.startErrs[1:]
		return nil, err
	}
	d.nextPid++
	p := &Proc{pid: d.nextPid, Name: l.Spec.Name, Instance: l.Instance, UID: l.Spec.UID, hold: d.hold,
		HostIDs: l.HostIDs, ShiftIDs: l.ShiftIDs, done: make(chan struct{}), release: make(chan struct{})}
	d.procs = append(d.procs, p)
	return p, nil
}

// Adopt implements driver.Driver.
func (d *Driver) Adopt(_ context.Context, name string, pid int) (driver.Proc, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.procs {
		if p.pid == pid && p.Name == name && !p.Exited() {
			return p, nil
		}
	}
	return nil, fmt.Errorf("sandbox %s: pid %d: %w", name, pid, driver.ErrGone)
}

// Remove implements driver.Driver.
func (d *Driver) Remove(_ context.Context, name, uid string, keep bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.removeErr != nil {
		return d.removeErr
	}
	d.removed = append(d.removed, Removal{Name: name, UID: uid, KeepWorkspace: keep})
	return nil
}

// Workspace implements driver.Driver.
func (d *Driver) Workspace(name string) string { return filepath.Join(d.Root, name, "workspace") }

// Procs returns every Proc started for sandbox name, oldest first.
func (d *Driver) Procs(name string) []*Proc {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []*Proc
	for _, p := range d.procs {
		if p.Name == name {
			out = append(out, p)
		}
	}
	return out
}

// Live returns the Procs of sandbox name that have not exited.
func (d *Driver) Live(name string) []*Proc {
	var out []*Proc
	for _, p := range d.Procs(name) {
		if !p.Exited() {
			out = append(out, p)
		}
	}
	return out
}

// Removed returns the calls of Remove so far.
func (d *Driver) Removed() []Removal {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Removal(nil), d.removed...)
}

// Proc is a fake supervisor.
type Proc struct {
	pid                 int
	Name, Instance, UID string
	hold                bool
	// HostIDs and ShiftIDs are what its launch carried.
	HostIDs  *idrange.Range
	ShiftIDs []idrange.Range

	mu      sync.Mutex
	done    chan struct{}
	release chan struct{}
	err     error
	stops   int
}

// Pid implements driver.Proc.
func (p *Proc) Pid() int { return p.pid }

// Done implements driver.Proc.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err implements driver.Proc.
func (p *Proc) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Exit ends the supervisor as if it died with err.
func (p *Proc) Exit(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
	default:
		p.err = err
		close(p.done)
	}
}

// Exited reports whether it has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Release lets a held Proc's Stop finish.
func (p *Proc) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.release:
	default:
		close(p.release)
	}
}

// Stops is how many times Stop was called.
func (p *Proc) Stops() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stops
}

// Stop implements driver.Proc: it ends the Proc, at once, or for a held
// one when released; a held one not released by ctx's deadline stays.
func (p *Proc) Stop(ctx context.Context, _ time.Duration) error {
	p.mu.Lock()
	p.stops++
	hold := p.hold
	p.mu.Unlock()
	if hold {
		select {
		case <-p.release:
		case <-p.done:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("supervisor %d did not exit: %w", p.pid, ctx.Err())
		}
	}
	p.Exit(errors.New("supervisor exited: signal: killed"))
	return nil
}
