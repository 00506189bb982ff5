package vmm

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/deskfarm/deskfarm/internal/fielderr"
)

// Overcommitted, the limit is a multiple of the host's memory, and the
// memory the host actually has left decides: a create is refused once
// MemAvailable would drop under the reserve.
func TestAdmissionOvercommit(t *testing.T) {
	f := newTestFarm(t, newFakeHV(), func(c *Config) { c.MemoryOvercommit = 3 })
	if _, limit := f.m.Capacity(); limit != 3*(16<<10-DefaultMemoryReserveMiB) {
		t.Fatalf("overcommitted limit %d, want 3 x (16 GiB - reserve)", limit)
	}
	avail := DefaultMemoryReserveMiB + 100 // a 256 MiB VM's share is 85 MiB
	f.m.memAvailable = func() (int, error) { return avail, nil }
	if _, err := f.m.Create(context.Background(), tinyOpts); err != nil {
		t.Fatalf("with its share available: %v", err)
	}
	avail = DefaultMemoryReserveMiB + 50
	_, err := f.m.Create(context.Background(), tinyOpts)
	if !errors.Is(err, ErrInsufficientResources) || fielderr.Field(err) != "memory_mib" || !strings.Contains(err.Error(), "available") {
		t.Fatalf("short of its share: %v", err)
	}

	// Without overcommit the host's MemAvailable is not consulted.
	g := newTestFarm(t, newFakeHV(), nil)
	g.m.memAvailable = func() (int, error) { return 0, errors.New("must not be read") }
	if _, err := g.m.Create(context.Background(), tinyOpts); err != nil {
		t.Fatal(err)
	}
}

func TestParseMemAvailable(t *testing.T) {
	// The head of /proc/meminfo on this project's host (Linux 6.18, 24 GiB).
	meminfo := "MemTotal:       24683584 kB\nMemFree:        18540856 kB\nMemAvailable:   23524720 kB\nBuffers:           65116 kB\n"
	if got, err := parseMemAvailable([]byte(meminfo)); err != nil || got != 23524720/1024 {
		t.Fatalf("got %d, %v", got, err)
	}
	if _, err := parseMemAvailable([]byte("MemTotal: 1 kB\n")); err == nil {
		t.Fatal("meminfo without MemAvailable accepted")
	}
}

// A fork is admitted whole or not at all, and with guest memory
// overcommitted the host's MemAvailable decides how many would fit.
func TestForkAdmissionOvercommit(t *testing.T) {
	f := newTestFarm(t, newFakeHV(), func(c *Config) { c.MemoryOvercommit = 4 })
	f.m.memAvailable = func() (int, error) { return DefaultMemoryReserveMiB + 2*64 + 10, nil } // room for two 256 MiB shares
	mcs := make([]*machine, 4)
	for i := range mcs {
		mcs[i] = &machine{spec: machineSpec{ID: newID(), MemoryMiB: 256}, st: machineState{state: StateCreating}}
	}
	err := f.m.admitAll(mcs)
	var le *LimitError
	if !errors.As(err, &le) || le.Limit != "memory" || le.Fits != 2 || !errors.Is(err, ErrInsufficientResources) {
		t.Fatalf("fork of 4 with room for 2: %v", err)
	}
	if used, _ := f.m.Capacity(); used != 0 {
		t.Fatalf("a refused fork registered %d MiB", used)
	}
	if err := f.m.admitAll(mcs[:2]); err != nil {
		t.Fatalf("fork of 2: %v", err)
	}
	if used, _ := f.m.Capacity(); used != 512 {
		t.Fatalf("fork of 2 registered %d MiB", used)
	}
}
