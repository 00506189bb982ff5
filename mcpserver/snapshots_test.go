package mcpserver_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/client"
	"github.com/deskfarm/deskfarm/internal/farmtest"
	"github.com/deskfarm/deskfarm/mcpserver"
	"github.com/deskfarm/deskfarm/web"
)

// snapshot, revert_snapshot and fork_episode act on the session's episode;
// a fork's episodes end with the session, and the default stays the source.
func TestSnapshotAndForkTools(t *testing.T) {
	d := farmtest.ServeDesktop(t, web.Options{})
	c, err := client.New(d.Server.URL)
	if err != nil {
		t.Fatal(err)
	}
	s := mcpserver.New(c, mcpserver.Options{})
	cs := connect(t, s)
	ok(t, cs, "start_episode", nil)
	ok(t, cs, "write_file", map[string]any{"path": "/tmp/x", "content": "one"})
	if got := text(ok(t, cs, "snapshot", map[string]any{"name": "cp1"})); !strings.Contains(got, "cp1") {
		t.Errorf("snapshot said %q", got)
	}
	ok(t, cs, "write_file", map[string]any{"path": "/tmp/x", "content": "two"})
	ok(t, cs, "revert_snapshot", map[string]any{"name": "cp1"})
	if got := text(ok(t, cs, "read_file", map[string]any{"path": "/tmp/x"})); got != "one" {
		t.Errorf("after the revert /tmp/x is %q, want %q", got, "one")
	}
	fails(t, cs, "revert_snapshot", map[string]any{"name": "none"}, "snapshot_not_found")
	fails(t, cs, "snapshot", map[string]any{"name": "cp1"}, "snapshot_exists")
	fails(t, cs, "snapshot", map[string]any{}, "name")
	fails(t, cs, "fork_episode", map[string]any{"count": 0}, "count")

	eps, _ := c.ListEpisodes(context.Background())
	if len(eps) != 1 {
		t.Fatalf("episodes: %+v", eps)
	}
	src := eps[0]
	res := ok(t, cs, "fork_episode", map[string]any{"count": 1})
	if got := text(res); !strings.Contains(got, "forked into 1") {
		t.Errorf("fork_episode said %q", got)
	}
	eps, _ = c.ListEpisodes(context.Background())
	if len(eps) != 2 {
		t.Fatalf("episodes after the fork: %+v", eps)
	}
	// The default is still the source: a write lands on its VM.
	ok(t, cs, "write_file", map[string]any{"path": "/tmp/y", "content": "src"})
	if got, _ := d.Farm.File(src.VM, "/tmp/y"); string(got) != "src" {
		t.Errorf("the default after a fork is not the source (its /tmp/y is %q)", got)
	}
	// The session's end ends the source and its fork.
	cs.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		eps, err := c.ListEpisodes(context.Background())
		if err == nil && len(eps) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("episodes after the session closed: %+v (%v)", eps, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
