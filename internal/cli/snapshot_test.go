package cli

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/internal/farmtest"
	"github.com/deskfarm/deskfarm/web"
)

func TestCLISnapshotsAndFork(t *testing.T) {
	d := farmtest.ServeDesktop(t, web.Options{})
	c := &cli{t: t, farm: d.Farm, env: map[string]string{"DESKFARM_SERVER": d.Server.URL,
		"DESKFARM_TOKEN_FILE": filepath.Join(t.TempDir(), "no-token")}}
	var ep api.Episode
	if err := json.Unmarshal([]byte(c.mustRun(nil, "episode", "start", "--json").stdout), &ep); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := d.Farm.WriteFile(ctx, ep.VM, "/tmp/f", []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := c.mustRun(nil, "snapshot", "save", ep.ID, "cp").stdout; !strings.HasPrefix(out, "cp\tsaved in ") {
		t.Errorf("save printed %q", out)
	}
	d.Farm.WriteFile(ctx, ep.VM, "/tmp/f", []byte("two"), 0o644) //nolint:errcheck // checked below
	// By VM id too.
	if out := c.mustRun(nil, "snapshot", "list", ep.VM).stdout; !strings.Contains(out, "NAME") || !strings.Contains(out, "\ncp ") {
		t.Errorf("list printed %q", out)
	}
	if out := c.mustRun(nil, "snapshot", "revert", ep.ID, "cp").stdout; !strings.Contains(out, "reverted to cp") {
		t.Errorf("revert printed %q", out)
	}
	if got, _ := d.Farm.File(ep.VM, "/tmp/f"); string(got) != "one" {
		t.Errorf("after the revert /tmp/f is %q", got)
	}
	res := c.run(nil, "snapshot", "revert", ep.ID, "nope")
	if res.err == nil || !strings.Contains(res.err.Error(), "snapshot_not_found") {
		t.Errorf("revert to none: %v", res.err)
	}
	c.mustRun(nil, "snapshot", "delete", ep.ID, "cp")

	var fork api.ForkResponse
	if err := json.Unmarshal([]byte(c.mustRun(nil, "episode", "fork", ep.ID, "-n", "1", "--json").stdout), &fork); err != nil {
		t.Fatal(err)
	}
	if fork.Source != ep.ID || len(fork.Episodes) != 1 {
		t.Fatalf("fork: %+v", fork)
	}
	if got, _ := d.Farm.File(fork.Episodes[0].VM, "/tmp/f"); string(got) != "one" {
		t.Errorf("the fork's /tmp/f is %q", got)
	}
	res = c.run(nil, "episode", "fork", ep.ID, "-n", "1")
	if res.err == nil || !strings.Contains(res.err.Error(), "pool_full") {
		t.Errorf("fork over the max: %v", res.err)
	}
}
