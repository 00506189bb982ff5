package main

// The trajectory store of serve (issue 16): package trajectory over the
// farm's desks, pools and guests, under <state-dir>/trajectories.

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/deskfarm/deskfarm/atspi"
	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/trajectory"
	"github.com/deskfarm/deskfarm/vmm"
)

// trajectoriesDir is the store's directory under the state dir.
const trajectoriesDir = "trajectories"

// newTrajectories opens the farm's trajectory store.
func newTrajectories(cfg farmConfig, farm vmm.Farm, desks *desk.Pool, log *slog.Logger) (*trajectory.Manager, error) {
	return trajectory.New(trajectory.Config{
		Dir:         filepath.Join(cfg.StateDir, trajectoriesDir),
		BudgetBytes: cfg.TrajectoryBudget,
		Retention:   cfg.TrajectoryRetention,
		Desks:       trajectory.DeskPool(desks),
		A11y:        guestA11y(farm),
		Log:         log,
	})
}

// guestA11y reads a VM's accessibility tree in OSWorld's XML, as the
// osworld routes' /accessibility does (atspi.Read). On an image without
// AT-SPI it fails, and the step keeps no tree.
func guestA11y(farm vmm.Farm) trajectory.A11y {
	return func(ctx context.Context, vm string) ([]byte, error) {
		return atspi.Read(ctx, farm, vm, atspi.ModeOSWorld)
	}
}

// byteUnits are the suffixes parseBytes takes.
var byteUnits = []struct {
	suffix string
	n      int64
}{
	{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
	{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"kB", 1e3}, {"B", 1},
}

// parseBytes reads a size such as "20GiB", "500MB" or "1048576".
func parseBytes(s string) (int64, error) {
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range byteUnits {
		if n, ok := strings.CutSuffix(num, u.suffix); ok {
			num, mult = strings.TrimSpace(n), u.n
			break
		}
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f <= 0 || f*float64(mult) > 1<<62 {
		return 0, fmt.Errorf("%q: want a positive size such as 20GiB, 500MB or 1048576", s)
	}
	return int64(f * float64(mult)), nil
}

// parseRetention reads an age such as "7d", "36h" or "90m"; a negative
// one keeps trajectories forever.
func parseRetention(s string) (time.Duration, error) {
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseFloat(d, 64)
		if err == nil && n != 0 {
			return time.Duration(n * float64(24*time.Hour)), nil
		}
	} else if d, err := time.ParseDuration(s); err == nil && d != 0 {
		return d, nil
	}
	return 0, fmt.Errorf("%q: want an age such as 7d, 36h or 90m (negative: keep forever)", s)
}
