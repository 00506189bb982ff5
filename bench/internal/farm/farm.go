// Package farm opens the VM manager a benchmark measures with: real libvirt
// and the image cache, on a state dir of the benchmark's own (QEMU must
// reach it, so not /tmp), logging only warnings so tables stay readable.
package farm

import (
	"context"
	"fmt"
	"log/slog"
	"os"

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
