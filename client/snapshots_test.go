package client_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/client"
	"github.com/deskfarm/deskfarm/internal/farmtest"
	"github.com/deskfarm/deskfarm/web"
)

func desktopClient(t *testing.T) (*client.Client, *farmtest.Desktop) {
	t.Helper()
	d := farmtest.ServeDesktop(t, web.Options{})
	c, err := client.New(d.Server.URL)
	if err != nil {
		t.Fatal(err)
	}
	return c, d
}

func writeFile(t *testing.T, c *client.Client, tg client.Target, path, data string) {
	t.Helper()
	if err := c.WriteFile(context.Background(), tg, path, strings.NewReader(data), int64(len(data)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// readFile is the file's content, or the API's error code for it.
func readFile(t *testing.T, c *client.Client, tg client.Target, path string) string {
	t.Helper()
	var b bytes.Buffer
	if _, err := c.ReadFile(context.Background(), tg, path, &b); err != nil {
		return "error " + apiErr(t, err).Code
	}
	return b.String()
}

// wantCode checks an API error's status, code and field.
func wantCode(t *testing.T, what string, err error, status int, code, field string) *api.Error {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want %s", what, code)
	}
	e := apiErr(t, err)
	if e.Status != status || e.Code != code || e.Field != field {
		t.Fatalf("%s: %d %s (field %q): %s; want %d %s (field %q)", what, e.Status, e.Code, e.Field, e.Message, status, code, field)
	}
	return e
}

func TestSnapshots(t *testing.T) {
	c, d := desktopClient(t)
	ctx := context.Background()
	ep, err := c.StartEpisode(ctx, api.StartEpisodeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	e := client.Episode(ep.ID)
	writeFile(t, c, e, "/tmp/a", "before")
	snap, err := c.SaveSnapshot(ctx, e, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if created, err := time.Parse(time.RFC3339, snap.CreatedAt); snap.Name != "s1" || snap.Bytes <= 0 || err != nil || time.Since(created) > time.Hour {
		t.Fatalf("saved: %+v (created_at: %v)", snap, err)
	}
	writeFile(t, c, e, "/tmp/a", "changed")
	writeFile(t, c, e, "/tmp/b", "after")

	list, err := c.Snapshots(ctx, e)
	if err != nil || len(list.Snapshots) != 1 || list.Snapshots[0].Name != "s1" || list.MaxCount == 0 || list.MaxBytes == 0 {
		t.Fatalf("list: %+v %v", list, err)
	}
	// The VM's route lists the same.
	if byVM, err := c.Snapshots(ctx, client.VM(ep.VM)); err != nil || len(byVM.Snapshots) != 1 {
		t.Fatalf("list by vm: %+v %v", byVM, err)
	}
	_, err = c.SaveSnapshot(ctx, e, "s1")
	wantCode(t, "save a name taken", err, http.StatusConflict, api.CodeSnapshotExists, "")
	_, err = c.SaveSnapshot(ctx, e, "deskfarm-ready")
	wantCode(t, "save a reserved name", err, http.StatusBadRequest, api.CodeInvalidRequest, "name")

	// Revert: the file written before is back, the one written after gone.
	res, err := c.RevertSnapshot(ctx, e, "s1")
	if err != nil || res.Snapshot != "s1" || res.ID != ep.VM {
		t.Fatalf("revert: %+v %v", res, err)
	}
	if got := readFile(t, c, e, "/tmp/a"); got != "before" {
		t.Errorf("/tmp/a after the revert: %q, want %q", got, "before")
	}
	if got := readFile(t, c, e, "/tmp/b"); !strings.HasPrefix(got, "error ") {
		t.Errorf("/tmp/b after the revert: %q, want it gone", got)
	}
	_, err = c.RevertSnapshot(ctx, e, "nope")
	wantCode(t, "revert to none", err, http.StatusNotFound, api.CodeSnapshotNotFound, "")

	// A limit refusal names the limit.
	d.Farm.Lock()
	d.Farm.MaxSnapshots = 2
	d.Farm.Unlock()
	if _, err := c.SaveSnapshot(ctx, e, "s2"); err != nil {
		t.Fatal(err)
	}
	_, err = c.SaveSnapshot(ctx, e, "s3")
	le := wantCode(t, "save over the limit", err, http.StatusConflict, api.CodeSnapshotLimit, "snapshots_per_vm")
	if !strings.Contains(le.Message, "snapshots_per_vm") || !strings.Contains(le.Message, "2 of 2") {
		t.Errorf("limit message %q does not name the limit and its value", le.Message)
	}

	if err := c.DeleteSnapshot(ctx, e, "s1"); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "delete again", c.DeleteSnapshot(ctx, e, "s1"), http.StatusNotFound, api.CodeSnapshotNotFound, "")

	// The episode's end removes its snapshots; its VM, back in the pool,
	// refuses a save no episode asked for.
	if _, err := c.EndEpisode(ctx, ep.ID); err != nil {
		t.Fatal(err)
	}
	if after, err := c.Snapshots(ctx, client.VM(ep.VM)); err != nil || len(after.Snapshots) != 0 {
		t.Fatalf("snapshots after the episode ended: %+v %v", after, err)
	}
	_, err = c.SaveSnapshot(ctx, client.VM(ep.VM), "x")
	wantCode(t, "save on an unleased pool vm", err, http.StatusConflict, api.CodeNotLeased, "")
	_, err = c.SaveSnapshot(ctx, e, "x")
	wantCode(t, "save on an ended episode", err, http.StatusGone, api.CodeEpisodeEnded, "")
}

func TestFork(t *testing.T) {
	c, _ := desktopClient(t) // one pool, min_warm 1, max 2: the warm VM makes room
	ctx := context.Background()
	src, err := c.StartEpisode(ctx, api.StartEpisodeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, c, client.Episode(src.ID), "/tmp/state", "mid-task")
	res, err := c.Fork(ctx, src.ID, 1, 120)
	if err != nil {
		t.Fatal(err)
	}
	if res.Source != src.ID || len(res.Episodes) != 1 {
		t.Fatalf("fork: %+v", res)
	}
	f := res.Episodes[0]
	if f.ID == src.ID || f.VM == src.VM || f.Pool != src.Pool || f.State != "active" || f.TTLSeconds != 120 || f.CleanStart || f.ViewerURL == "" {
		t.Fatalf("forked episode: %+v", f)
	}
	if got := readFile(t, c, client.Episode(f.ID), "/tmp/state"); got != "mid-task" {
		t.Errorf("the fork sees %q, want the source's file", got)
	}
	// The source goes on: its later writes are not the fork's.
	writeFile(t, c, client.Episode(src.ID), "/tmp/later", "x")
	if got := readFile(t, c, client.Episode(f.ID), "/tmp/later"); !strings.HasPrefix(got, "error ") {
		t.Errorf("the fork sees the source's later file: %q", got)
	}
	if now, err := c.GetEpisode(ctx, src.ID); err != nil || now.State != "active" {
		t.Fatalf("source after the fork: %+v %v", now, err)
	}

	// The pool (max 2) holds both: a fork of one more is refused, naming
	// the max and how many would fit.
	_, err = c.Fork(ctx, src.ID, 1, 0)
	e := wantCode(t, "fork over the pool's max", err, http.StatusTooManyRequests, api.CodePoolFull, "count")
	if !strings.Contains(e.Message, "max of 2: 0 would") {
		t.Errorf("pool refusal %q does not say how many fit", e.Message)
	}
	_, err = c.Fork(ctx, src.ID, 0, 0)
	wantCode(t, "fork of 0", err, http.StatusBadRequest, api.CodeInvalidRequest, "count")
	_, err = c.Fork(ctx, "ep-000000000000", 1, 0)
	wantCode(t, "fork of no episode", err, http.StatusNotFound, api.CodeEpisodeNotFound, "")
}

// The host's admission refuses a fork whole and says how many would fit.
func TestForkHostFull(t *testing.T) {
	c, d := desktopClient(t)
	ctx := context.Background()
	d.Farm.Lock()
	d.Farm.MemoryLimitMiB = 1024 // the source's: no warm VM beside it
	d.Farm.Unlock()
	src, err := c.StartEpisode(ctx, api.StartEpisodeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Fork(ctx, src.ID, 1, 0)
	e := wantCode(t, "fork with no room", err, http.StatusInsufficientStorage, api.CodeInsufficientResources, "count")
	if !strings.Contains(e.Message, "0 would") {
		t.Errorf("admission refusal %q does not say how many fit", e.Message)
	}
	if n := d.Farm.Count(); n != 1 {
		t.Errorf("%d vms after a refused fork, want the source only", n)
	}
}
