// Package farmtest serves the real HTTP API (web.NewServer) over an
// in-memory farm, for round-trip tests of package client and the CLI.
//
// It is the fake that cmd/deskfarm's tests used, moved here so the client,
// the CLI and serve's tests share it; vmm's shared fake (vmm/vmmtest) is to
// replace it.
package farmtest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/web"
)

// Farm is an in-memory vmm.Farm for round-trip tests of the CLI and
// client through the real HTTP handler. It boots nothing. Tests may read
// its fields after the requests they made have returned.
type Farm struct {
	mu    sync.Mutex
	VMs   map[string]vmm.VM
	Files map[string][]byte // by VM id + guest path
	Modes map[string]uint32 // by VM id + guest path
	n     int
	// Destroyed counts destroyed VMs.
	Destroyed int
}

var _ vmm.Farm = (*Farm)(nil)

// NewFarm returns an empty farm. Create accepts the images "desktop" and "tiny".
func NewFarm() *Farm {
	return &Farm{VMs: map[string]vmm.VM{}, Files: map[string][]byte{}, Modes: map[string]uint32{}}
}

func (f *Farm) lookup(id string) error {
	if _, ok := f.VMs[id]; !ok {
		return fmt.Errorf("vm %s: %w", id, vmm.ErrNotFound)
	}
	return nil
}

func (f *Farm) Create(_ context.Context, o vmm.CreateOptions) (vmm.VM, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if o.Image != "desktop" && o.Image != "tiny" {
		return vmm.VM{}, fmt.Errorf("create vm: image %q: %w", o.Image, vmm.ErrUnknownImage)
	}
	f.n++
	vm := vmm.VM{ID: fmt.Sprintf("v%02d", f.n), Image: o.Image, State: vmm.StateReady, Accel: "tcg",
		MemoryMiB: orDefault(o.MemoryMiB, vmm.DefaultMemoryMiB), VCPUs: orDefault(o.VCPUs, vmm.DefaultVCPUs),
		Width: orDefault(o.Width, vmm.DefaultWidth), Height: orDefault(o.Height, vmm.DefaultHeight),
		CreatedAt: time.Now().Add(time.Duration(f.n) * time.Millisecond), BootSeconds: 34.2}
	f.VMs[vm.ID] = vm
	return vm, nil
}

func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

func (f *Farm) List(context.Context) ([]vmm.VM, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var vms []vmm.VM
	for _, vm := range f.VMs {
		vms = append(vms, vm)
	}
	return vms, nil
}

func (f *Farm) Get(_ context.Context, id string) (vmm.VM, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.VMs[id], f.lookup(id)
}

func (f *Farm) Destroy(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.lookup(id); err != nil {
		return err
	}
	delete(f.VMs, id)
	f.Destroyed++
	return nil
}

func (f *Farm) Reset(_ context.Context, id string) (vmm.ResetResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return vmm.ResetResult{Duration: 310 * time.Millisecond}, f.lookup(id)
}

// Exec understands three programs: cat (stdin to stdout), env, and fail
// (writes its args to stderr and exits 7).
func (f *Farm) Exec(_ context.Context, id string, req vmm.ExecRequest) (vmm.ExecResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.lookup(id); err != nil {
		return vmm.ExecResult{}, err
	}
	switch req.Argv[0] {
	case "cat":
		return vmm.ExecResult{Stdout: req.Stdin}, nil
	case "env":
		return vmm.ExecResult{Stdout: []byte(strings.Join(req.Env, "\n"))}, nil
	case "fail":
		return vmm.ExecResult{ExitCode: 7, Stderr: []byte(strings.Join(req.Argv[1:], " "))}, nil
	case "timeout":
		return vmm.ExecResult{}, fmt.Errorf("exec in vm %s: after %s: %w", id, req.Timeout, vmm.ErrTimeout)
	}
	return vmm.ExecResult{ExitCode: 127}, nil
}

func (f *Farm) ReadFile(_ context.Context, id, path string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.lookup(id); err != nil {
		return nil, err
	}
	data, ok := f.Files[id+path]
	if !ok {
		return nil, fmt.Errorf("read %s in vm %s: no such file: %w", path, id, vmm.ErrAgent)
	}
	return data, nil
}

func (f *Farm) WriteFile(_ context.Context, id, path string, data []byte, mode uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.lookup(id); err != nil {
		return err
	}
	f.Files[id+path], f.Modes[id+path] = data, mode
	return nil
}

// Serve starts an httptest server of the API over a new Farm; it stops
// when the test ends. opts.Logger defaults to a discarding one.
func Serve(t testing.TB, opts web.Options) (*httptest.Server, *Farm) {
	t.Helper()
	farm := NewFarm()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	srv := httptest.NewServer(web.NewServer(farm, opts))
	t.Cleanup(srv.Close)
	return srv, farm
}
