// Package farm opens the VM manager a benchmark measures with: real libvirt
// and the image cache, on a state dir of the benchmark's own (QEMU must
// reach it, so not /tmp), logging only warnings so tables stay readable.
package farm

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/deskfarm/deskfarm/images"
	"github.com/deskfarm/deskfarm/vmm"
)

// DefaultStateDir is where benchmarks keep their VMs.
const DefaultStateDir = "/var/lib/deskfarm-bench"

// Open returns a Manager on stateDir and the logger it uses.
func Open(ctx context.Context, stateDir string) (*vmm.Manager, *slog.Logger, error) {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	m, err := vmm.New(ctx, vmm.Config{StateDir: stateDir, Images: vmm.StoreImages{Store: &images.Store{}}, Log: log})
	if err != nil {
		return nil, nil, fmt.Errorf("open farm on %s: %w", stateDir, err)
	}
	return m, log, nil
}

// OpenConfig is Open with the caller's Config; StateDir, Images and Log
// are filled in when empty.
func OpenConfig(ctx context.Context, cfg vmm.Config) (*vmm.Manager, *slog.Logger, error) {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if cfg.StateDir == "" {
		cfg.StateDir = DefaultStateDir
	}
	if cfg.Images == nil {
		cfg.Images = vmm.StoreImages{Store: &images.Store{}}
	}
	if cfg.Log == nil {
		cfg.Log = log
	}
	m, err := vmm.New(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("open farm on %s: %w", cfg.StateDir, err)
	}
	return m, cfg.Log, nil
}

// QEMURSS is the resident memory (VmRSS) of VM id's QEMU, in MiB, found
// through libvirt's pid file.
func QEMURSS(id string) (int, error) {
	b, err := os.ReadFile(filepath.Join(vmm.DefaultQEMUPidDir, vmm.DomainPrefix+id+".pid"))
	if err != nil {
		return 0, err
	}
	status, err := os.ReadFile(filepath.Join("/proc", strings.TrimSpace(string(b)), "status"))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kib, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return kib / 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for the QEMU of vm %s", id)
}
