// Package desk pairs each ready VM with its live display: one VNC connection
// (a vnc.Client mirroring the framebuffer) and the action executors that play
// agent actions onto it. Desks open on first use and close when their VM is
// destroyed; every consumer of a VM's screen shares the one connection.
package desk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/vnc"
)

// VMs is what the pool needs from the VM layer.
type VMs interface {
	Get(ctx context.Context, id string) (vmm.VM, error)
}

// Pool holds the desks of a farm's VMs.
type Pool struct {
	vms VMs
	log *slog.Logger

	mu    sync.Mutex
	desks map[string]*Desk
}

// NewPool returns an empty pool over vms.
func NewPool(vms VMs, log *slog.Logger) *Pool {
	if log == nil {
		log = slog.Default()
	}
	return &Pool{vms: vms, log: log, desks: map[string]*Desk{}}
}

// Desk is one VM's live display and its executors, one per screenshot size
// (an executor keeps the keys and buttons an agent holds across requests).
type Desk struct {
	VM      string
	Display *vnc.Client

	mu    sync.Mutex
	execs map[string]*actions.Executor
}

// dialTimeout bounds connecting to a VM's VNC socket and its first frame.
const dialTimeout = 15 * time.Second

// Get returns the desk of a ready VM, connecting on first use.
func (p *Pool) Get(ctx context.Context, id string) (*Desk, error) {
	vm, err := p.vms.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if vm.State != vmm.StateReady {
		return nil, fmt.Errorf("display of vm %s: %w (state %s)", id, vmm.ErrNotRunning, vm.State)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if d, ok := p.desks[id]; ok {
		return d, nil
	}
	// Held under p.mu: a second caller for the same VM waits for this dial
	// rather than opening a second connection. Dials take milliseconds.
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	c, err := vnc.Dial(dctx, vnc.Config{Socket: vm.VNCSocket, VM: id, Log: p.log})
	if err != nil {
		return nil, fmt.Errorf("display of vm %s: %w", id, err)
	}
	d := &Desk{VM: id, Display: c, execs: map[string]*actions.Executor{}}
	p.desks[id] = d
	return d, nil
}

// Executor returns the desk's executor for a screenshot size.
func (d *Desk) Executor(size actions.ScreenshotSize) (*actions.Executor, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	key := size.String()
	if e, ok := d.execs[key]; ok {
		return e, nil
	}
	e, err := actions.NewExecutor(d.Display, actions.ExecutorConfig{Size: size})
	if err != nil {
		return nil, err
	}
	d.execs[key] = e
	return e, nil
}

// ReleaseInput lets go of every key and button agents hold on the desk, as
// after a reset, when the guest no longer knows of them.
func (d *Desk) ReleaseInput() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var errs []error
	for _, e := range d.execs {
		errs = append(errs, e.Release())
	}
	return errors.Join(errs...)
}

// Reset releases held input on the VM's desk, if it has one.
func (p *Pool) Reset(id string) {
	p.mu.Lock()
	d := p.desks[id]
	p.mu.Unlock()
	if d != nil {
		if err := d.ReleaseInput(); err != nil {
			p.log.Warn("release input after reset", "vm", id, "op", "reset", "err", err)
		}
	}
}

// Drop closes the VM's desk, if it has one. Call it before destroying the VM.
func (p *Pool) Drop(id string) {
	p.mu.Lock()
	d := p.desks[id]
	delete(p.desks, id)
	p.mu.Unlock()
	if d != nil {
		d.Display.Close()
	}
}

// Close closes every desk.
func (p *Pool) Close() {
	p.mu.Lock()
	ids := make([]string, 0, len(p.desks))
	for id := range p.desks {
		ids = append(ids, id)
	}
	p.mu.Unlock()
	for _, id := range ids {
		p.Drop(id)
	}
}
