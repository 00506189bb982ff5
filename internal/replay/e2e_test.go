package replay_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/internal/testbuf"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/client"
	"github.com/deskfarm/deskfarm/internal/farmproc"
	"github.com/deskfarm/deskfarm/internal/replay"
	"github.com/deskfarm/deskfarm/internal/testenv"
)

// replayStateDir is the E2E farm's state dir: QEMU reaches it, and it is
// no user's /var/lib/deskfarm.
const replayStateDir = "/var/lib/deskfarm-replay-e2e"

const replayPools = `pools:
  - name: desktop
    image: desktop
    memory_mib: 1024
    vcpus: 2
    min_warm: 0
    max: 1
`

// TestE2EReplayTerminalEpisode records a terminal episode on the desktop
// image through the real `deskfarm serve` (record: true; a terminal opened
// with ctrl+alt+t, a command typed and run), exports it with `deskfarm
// episode export`, and replays it with `deskfarm replay` on fresh
// episodes, $DESKFARM_REPLAY_RUNS times (default 3): each replay must
// reproduce every step within the default threshold. The log says each
// step's distance and how many replays reproduced every step.
func TestE2EReplayTerminalEpisode(t *testing.T) {
	testenv.RequireVM(t, "desktop")
	runs := 3
	if n, err := strconv.Atoi(os.Getenv("DESKFARM_REPLAY_RUNS")); err == nil && n > 0 {
		runs = n
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	if extra, err := farmproc.Purge(ctx, replayStateDir); err != nil || len(extra) > 0 {
		t.Logf("removed what an earlier run left in %s: %v %v", replayStateDir, extra, err)
	}
	os.RemoveAll(replayStateDir)
	bin, err := farmproc.Build(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	log := &testbuf.Buffer{}
	f, err := farmproc.Start(ctx, farmproc.Config{Bin: bin, StateDir: replayStateDir, Pools: replayPools, Log: log})
	if err != nil {
		t.Fatalf("%v\nserver log:\n%s", err, log)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log (tail):\n%s", tail(log.String(), 60))
		}
		if err := f.Stop(); err != nil {
			t.Error(err)
		}
		if _, err := farmproc.Purge(context.Background(), replayStateDir); err != nil {
			t.Errorf("purge %s: %v", replayStateDir, err)
		}
		os.RemoveAll(replayStateDir)
	})
	token, err := os.ReadFile(filepath.Join(replayStateDir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(f.URL, client.WithToken(strings.TrimSpace(string(token))))
	if err != nil {
		t.Fatal(err)
	}

	// Record: the steps an agent would take, as neutral actions.
	record := true
	ep, err := c.StartEpisode(ctx, api.StartEpisodeRequest{Pool: "desktop", Record: &record})
	if err != nil {
		t.Fatal(err)
	}
	if !ep.Recording {
		t.Fatalf("episode %s started with record is not recording: %+v", ep.ID, ep)
	}
	t.Logf("recording episode %s on vm %s (booted %v, %.1fs)", ep.ID, ep.VM, !ep.Warm, ep.BootSeconds)
	target := client.Episode(ep.ID)
	for _, step := range []string{
		// The terminal takes seconds to open under TCG: the step waits for
		// it, so that its screenshot shows it (a replay waits as long).
		`[{"kind":"key","keys":["ctrl","alt","t"]},{"kind":"wait","duration_ms":8000}]`,
		`[{"kind":"type","text":"echo replayed-$((6*7)) > /tmp/replay.txt; cat /tmp/replay.txt"}]`,
		`[{"kind":"key","keys":["Return"]},{"kind":"wait","duration_ms":1500}]`,
		`[{"kind":"screenshot"}]`,
	} {
		out, err := c.Act(ctx, target, api.ActionsRequest{Tool: api.ToolNeutral, Input: json.RawMessage(step)})
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		t.Logf("recorded %s: settle %.0f ms (timed out %v)", step, out.SettleMS, out.SettleTimedOut)
	}
	res, err := c.Exec(ctx, target, api.ExecRequest{Argv: []string{"cat", "/tmp/replay.txt"}})
	if err != nil || res.Stdout != "replayed-42\n" {
		t.Fatalf("the typed command wrote %q (%v): the terminal did not get it", res.Stdout, err)
	}
	if _, err := c.EndEpisode(ctx, ep.ID); err != nil {
		t.Fatal(err)
	}
	// The score a harness would report: OSWorld's result.txt.
	if err := c.SetTrajectoryResult(ctx, ep.ID, 1); err != nil {
		t.Fatal(err)
	}

	// Export with the CLI, as a user would.
	dir := t.TempDir()
	cli := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(os.Environ(), client.EnvServer+"="+f.URL, client.EnvTokenFile+"="+filepath.Join(replayStateDir, "token"),
			client.EnvToken+"=")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	exportDir := filepath.Join(dir, "export")
	out, err := cli("episode", "export", ep.ID, exportDir)
	if err != nil {
		t.Fatalf("deskfarm episode export: %v\n%s", err, out)
	}
	t.Logf("export: %s", strings.TrimSpace(out))
	for _, name := range []string{"traj.jsonl", "deskfarm/trajectory.jsonl", "deskfarm/info.json"} {
		if _, err := os.Stat(filepath.Join(exportDir, name)); err != nil {
			t.Errorf("the export lacks %s: %v", name, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(exportDir, "result.txt")); err != nil || strings.TrimSpace(string(b)) != "1.0" {
		t.Errorf("result.txt holds %q (%v), want 1.0", b, err)
	}
	checkOSWorldMonitor(t, ctx, exportDir, "terminal")
	tr, err := replay.Load(exportDir)
	if err != nil {
		t.Fatal(err)
	}
	actionSteps := 0
	for _, s := range tr.Steps {
		if s.Kind == api.KindActions {
			actionSteps++
		}
	}
	if actionSteps != 4 {
		t.Fatalf("the export holds %d actions steps of %d, want the 4 recorded", actionSteps, len(tr.Steps))
	}

	// Replay, several times, each on a fresh episode.
	reproduced := 0
	for i := 1; i <= runs; i++ {
		out, err := cli("replay", exportDir, "--pool", "desktop", "--save", filepath.Join(dir, "replay-"+strconv.Itoa(i)))
		t.Logf("replay %d:\n%s", i, out)
		// The last step, the exec of cat, must run again and find the
		// file the replayed typing wrote (exit 0 as recorded).
		if err == nil && strings.Contains(out, "reproduced all") && strings.Contains(out, "agent exec\tplayed") {
			reproduced++
		} else {
			t.Errorf("replay %d did not reproduce every step: %v", i, err)
		}
	}
	t.Logf("%d of %d replays reproduced every step", reproduced, runs)
}

func tail(s string, lines int) string {
	l := strings.Split(s, "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}
