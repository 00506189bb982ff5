package web_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/client"
	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/internal/testenv"
	"github.com/deskfarm/deskfarm/pool"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/web"
)

// Named snapshots and forks through HTTP on a real farm (tiny image): a
// file written before a snapshot is there after its revert and one written
// after is gone, RAM included (/dev/shm); a fork of 2 sees the source's
// files and RAM while the source goes on and its later writes stay its
// own; a save past the limit is refused naming it; the episode's end
// leaves its VM with no snapshots.
func TestE2ESnapshotsAndFork(t *testing.T) {
	st := testenv.RequireVM(t, "tiny")
	m, err := vmm.New(context.Background(), vmm.Config{StateDir: testenv.StateDir, Images: vmm.StoreImages{Store: st},
		LockWait: testenv.LockWait, MaxSnapshots: 2,
		Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatalf("vmm.New: %v", err)
	}
	t.Cleanup(func() { testenv.Cleanup(t, m) })
	cfg := pool.Config{Pools: []pool.PoolConfig{{Name: "tiny", Image: "tiny", MemoryMiB: 256, VCPUs: 1, Max: 3}}}
	cfg.SetDefaults()
	pm, err := pool.New(context.Background(), m, cfg, pool.Options{StateDir: testenv.StateDir})
	if err != nil {
		t.Fatal(err)
	}
	desks := desk.NewPool(m, nil)
	srv := httptest.NewServer(web.NewServer(m, web.Options{Desks: desks, Pools: pm}))
	t.Cleanup(func() { srv.Close(); desks.Close(); pm.Close() })
	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sh := func(tg client.Target, script string) string {
		t.Helper()
		res, err := c.Exec(ctx, tg, api.ExecRequest{Argv: []string{"sh", "-c", script}})
		if err != nil {
			t.Fatalf("exec %q on %s: %v", script, tg, err)
		}
		return strings.TrimSpace(res.Stdout)
	}
	// state is what a guest holds: a file on disk and a value in RAM only.
	state := func(tg client.Target, name string) string {
		return sh(tg, "cat /root/"+name+" /dev/shm/"+name+" 2>/dev/null; true")
	}

	ep, err := c.StartEpisode(ctx, api.StartEpisodeRequest{Pool: "tiny", TTLS: 600})
	if err != nil {
		t.Fatal(err)
	}
	e := client.Episode(ep.ID)
	sh(e, "echo disk-before > /root/before; echo ram-before > /dev/shm/before; sync")
	snap, err := c.SaveSnapshot(ctx, e, "s1")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("saved %s: %d bytes in %d ms", snap.Name, snap.Bytes, snap.SaveMS)
	sh(e, "echo disk-after > /root/after; echo ram-after > /dev/shm/after; sync")
	if got := state(e, "after"); got != "disk-after\nram-after" {
		t.Fatalf("after the writes: %q", got)
	}
	rev, err := c.RevertSnapshot(ctx, e, "s1")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("reverted in %d ms", rev.RevertMS)
	if got := state(e, "before"); got != "disk-before\nram-before" {
		t.Errorf("written before the snapshot, after its revert: %q", got)
	}
	if got := state(e, "after"); got != "" {
		t.Errorf("written after the snapshot, after its revert: %q, want nothing", got)
	}

	// A limit refusal names the limit (MaxSnapshots 2).
	if _, err := c.SaveSnapshot(ctx, e, "s2"); err != nil {
		t.Fatal(err)
	}
	_, err = c.SaveSnapshot(ctx, e, "s3")
	ae, ok := err.(*api.Error)
	if !ok || ae.Status != http.StatusConflict || ae.Code != api.CodeSnapshotLimit || ae.Field != "snapshots_per_vm" ||
		!strings.Contains(ae.Message, "snapshots_per_vm") {
		t.Fatalf("a third snapshot: %v, want 409 snapshot_limit naming snapshots_per_vm", err)
	}
	if list, err := c.Snapshots(ctx, e); err != nil || len(list.Snapshots) != 2 || list.MaxCount != 2 {
		t.Fatalf("list: %+v %v", list, err)
	}

	// Fork 2: each sees the source's disk and RAM; the source goes on and
	// what it writes next is its own.
	fork, err := c.Fork(ctx, ep.ID, 2, 300)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("forked 2 in %d ms", fork.ForkMS)
	if len(fork.Episodes) != 2 {
		t.Fatalf("fork: %+v", fork)
	}
	sh(e, "echo disk-later > /root/later; sync")
	for _, f := range fork.Episodes {
		fe := client.Episode(f.ID)
		if got := state(fe, "before"); got != "disk-before\nram-before" {
			t.Errorf("fork %s (vm %s) holds %q, want the source's state", f.ID, f.VM, got)
		}
		if got := state(fe, "later"); got != "" {
			t.Errorf("fork %s holds the source's later write: %q", f.ID, got)
		}
		if list, err := c.Snapshots(ctx, fe); err != nil || len(list.Snapshots) != 0 {
			t.Errorf("fork %s holds snapshots: %+v %v", f.ID, list, err)
		}
	}
	if got := state(e, "later"); got != "disk-later" {
		t.Errorf("the source after the fork: %q", got)
	}
	// The pool (max 3) holds all three: one more is refused, saying so.
	_, err = c.Fork(ctx, ep.ID, 1, 0)
	if ae, ok := err.(*api.Error); !ok || ae.Code != api.CodePoolFull || !strings.Contains(ae.Message, "0 would") {
		t.Errorf("a fork over the pool's max: %v, want pool_full saying 0 would", err)
	}

	// The episode's end drops its snapshots: its VM, back in the pool,
	// lists none.
	for _, id := range []string{ep.ID, fork.Episodes[0].ID, fork.Episodes[1].ID} {
		if _, err := c.EndEpisode(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if list, err := c.Snapshots(ctx, client.VM(ep.VM)); err != nil || len(list.Snapshots) != 0 {
		t.Errorf("the source's vm after its episode ended: %+v %v, want no snapshots", list, err)
	}
}
