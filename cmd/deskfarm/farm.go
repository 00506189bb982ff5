package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/deskfarm/deskfarm/images"
	"github.com/deskfarm/deskfarm/pool"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

func init() { newFarm = openFarm }

// pooledFarm is a farm that also keeps pools; serve hands them to the API.
type pooledFarm interface {
	Pools() *pool.Manager
	Metrics() *prometheus.Registry
}

// managedFarm is openFarm's farm: the vmm.Manager, its pools and the
// metrics registry they report to.
type managedFarm struct {
	*vmm.Manager
	pools *pool.Manager
	reg   *prometheus.Registry
}

func (f managedFarm) Pools() *pool.Manager          { return f.pools }
func (f managedFarm) Metrics() *prometheus.Registry { return f.reg }

// poolConfig is the pool config serve's flags ask for.
func poolConfig(cfg farmConfig) (pool.Config, error) {
	var pc pool.Config
	if cfg.Cluster != nil {
		// The cluster's DesktopPools are the pools (the agent sets them);
		// until it does, the default pool without warm VMs, which boots
		// nothing.
		pc = pool.DefaultConfig("", 0)
		pc.SetDefaults()
		return pc, pc.Validate()
	}
	if cfg.Pools != "" {
		var err error
		if pc, err = pool.LoadConfig(cfg.Pools); err != nil {
			return pc, err
		}
	} else {
		warm := 0
		if cfg.Warm != "" {
			warm = 1
		}
		pc = pool.DefaultConfig(cfg.Warm, warm)
	}
	for _, o := range cfg.PoolOverrides {
		if err := pc.Override(o); err != nil {
			return pc, err
		}
	}
	pc.SetDefaults()
	return pc, pc.Validate()
}

// openFarm is serve's VM backend: a vmm.Manager over libvirtd and the image
// cache, and the pools (which keep their warm VMs booted in the background).
func openFarm(ctx context.Context, cfg farmConfig) (vmm.Farm, func() error, error) {
	pc, err := poolConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	store := &images.Store{CacheDir: cfg.CacheDir, Log: slog.Default()}
	m, err := vmm.New(ctx, vmm.Config{StateDir: cfg.StateDir, Accel: cfg.Accel, LibvirtSocket: cfg.LibvirtSocket,
		Images: vmm.StoreImages{Store: store}, Log: slog.Default(), MemoryOvercommit: cfg.MemoryOvercommit,
		Standby: !cfg.NoStandby, BootTimeout: cfg.BootTimeout})
	if err != nil {
		return nil, nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		eventQueueCollector{m})
	restoreKSM := startKSM(!cfg.NoKSM, slog.Default()) // ksm.go
	pools, err := pool.New(ctx, m, pc, pool.Options{StateDir: cfg.StateDir, Log: slog.Default(), Registerer: reg})
	if err != nil {
		restoreKSM()
		m.Close()
		return nil, nil, fmt.Errorf("start pools: %w", err)
	}
	for _, p := range pc.Pools {
		slog.Info("pool", "op", "pool", "pool", p.Name, "image", p.Image, "min_warm", p.MinWarm, "max", p.Max, "memory_mib", p.MemoryMiB)
	}
	closeFn := func() error {
		// A warm VM still booting is canceled (and removed) by its create.
		err := errors.Join(pools.Close(), m.Close())
		restoreKSM()
		return err
	}
	return managedFarm{Manager: m, pools: pools, reg: reg}, closeFn, nil
}
