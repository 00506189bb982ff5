package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/deskfarm/deskfarm/images"
	"github.com/deskfarm/deskfarm/vmm"
)

func init() { newFarm = openFarm }

// openFarm is serve's VM backend: a vmm.Manager over libvirtd and the image
// cache. With cfg.Warm it makes sure one ready VM of that image exists.
func openFarm(ctx context.Context, cfg farmConfig) (vmm.Farm, func() error, error) {
	store := &images.Store{CacheDir: cfg.CacheDir, Log: slog.Default()}
	m, err := vmm.New(ctx, vmm.Config{StateDir: cfg.StateDir, Accel: cfg.Accel, LibvirtSocket: cfg.LibvirtSocket,
		Images: vmm.StoreImages{Store: store}, Log: slog.Default()})
	if err != nil {
		return nil, nil, err
	}
	warmCtx, stopWarm := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if cfg.Warm != "" {
			keepWarm(warmCtx, m, cfg.Warm)
		}
	}()
	closeFn := func() error {
		// A warm VM still booting is cancelled (and removed) by its create.
		stopWarm()
		<-done
		return m.Close()
	}
	return m, closeFn, nil
}

// keepWarm creates one VM of image unless a ready one exists already (say,
// adopted from before a restart).
func keepWarm(ctx context.Context, m *vmm.Manager, image string) {
	vms, _ := m.List(ctx)
	for _, v := range vms {
		if v.Image == image {
			slog.Info("warm vm present", "op", "warm", "vm", v.ID, "image", image)
			return
		}
	}
	slog.Info("booting warm vm", "op", "warm", "image", image, "accel", m.Accel())
	start := time.Now()
	vm, err := m.Create(ctx, vmm.CreateOptions{Image: image})
	if err != nil {
		slog.Error("warm vm failed", "op", "warm", "image", image, "err", err)
		return
	}
	slog.Info("warm vm ready", "op", "warm", "vm", vm.ID, "image", image, "duration", time.Since(start).Round(time.Second),
		"vnc_socket", vm.VNCSocket)
}
