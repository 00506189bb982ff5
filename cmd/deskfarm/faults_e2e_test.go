package main_test

// Fault tests of issue 9 ("Faults, in the suite and not by hand"): the real
// deskfarm binary, serving a pool of tiny VMs on real libvirt, driven only
// through package client, while the test kills, restarts or wedges what a
// farm depends on. One farm is shared by the subtests, in an order where
// each leaves it serving (the serve restart comes last).

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/internal/testbuf"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/client"
	"github.com/deskfarm/deskfarm/internal/farmproc"
	"github.com/deskfarm/deskfarm/internal/testenv"
)

// faultsStateDir is the fault farm's state dir: its own, so these tests
// never touch a user's farm or wait on testenv.StateDir's lock, and under
// /var/lib so QEMU reaches it. scripts/check-leftovers.sh checks it too.
const faultsStateDir = "/var/lib/deskfarm-test-faults"

const faultsPools = `pools:
  - name: tiny
    image: tiny
    memory_mib: 320
    vcpus: 1
    min_warm: 1
    max: 3
`

// refillWithin bounds how long the pool may take to boot a replacement
// warm tiny VM: a boot is ~5 s under TCG alone, but the suite shares two
// cores with other work.
const refillWithin = 2 * time.Minute

type faultFarm struct {
	*farmproc.Farm
	c   *client.Client
	log *testbuf.Buffer
}

func startFaultFarm(t *testing.T) *faultFarm {
	t.Helper()
	testenv.RequireVM(t, "tiny")
	ctx := context.Background()
	if extra, err := farmproc.Purge(ctx, faultsStateDir); err != nil || len(extra) > 0 {
		t.Logf("removed what an earlier run left in %s: %v %v", faultsStateDir, extra, err)
	}
	os.Remove(faultsStateDir + "/pools.json")
	bin, err := farmproc.Build(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	log := &testbuf.Buffer{}
	f, err := farmproc.Start(ctx, farmproc.Config{Bin: bin, StateDir: faultsStateDir, Pools: faultsPools, Log: log})
	if err != nil {
		t.Fatalf("%v\nserver log:\n%s", err, log)
	}
	ff := &faultFarm{Farm: f, c: f.Client, log: log}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log:\n%s", tail(log.String(), 200))
		}
		if err := f.Stop(); err != nil {
			t.Error(err)
		}
		extra, err := farmproc.Purge(context.Background(), faultsStateDir)
		if err != nil {
			t.Errorf("purge %s: %v", faultsStateDir, err)
		}
		if len(extra) > 0 {
			t.Errorf("VMs of %s the farm no longer knew (orphans): %v", faultsStateDir, extra)
		}
		checkNoLeftovers(t)
		os.RemoveAll(faultsStateDir)
	})
	ff.waitWarm(t, 1)
	return ff
}

func tail(s string, lines int) string {
	l := strings.Split(s, "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}

// checkNoLeftovers fails t if a domain or VM directory of the fault state
// dir is left.
func checkNoLeftovers(t *testing.T) {
	t.Helper()
	doms, err := farmproc.Domains(faultsStateDir)
	if err != nil {
		t.Errorf("list domains: %v", err)
	}
	dirs, err := farmproc.VMDirs(faultsStateDir)
	if err != nil {
		t.Errorf("list VM dirs: %v", err)
	}
	if len(doms) > 0 || len(dirs) > 0 {
		t.Errorf("leftovers of %s: domains %v, VM dirs %v", faultsStateDir, doms, dirs)
	}
}

func (f *faultFarm) pool(t *testing.T) api.Pool {
	t.Helper()
	ps, err := f.c.Pools(context.Background())
	if err != nil {
		t.Fatalf("GET /v1/pools: %v", err)
	}
	for _, p := range ps {
		if p.Name == "tiny" {
			return p
		}
	}
	t.Fatalf("GET /v1/pools: no pool tiny in %+v", ps)
	return api.Pool{}
}

// waitWarm waits until the pool holds n warm VMs and boots none.
func (f *faultFarm) waitWarm(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(refillWithin)
	var p api.Pool
	for time.Now().Before(deadline) {
		if p = f.pool(t); p.Warm >= n && p.Booting == 0 && p.Ending == 0 {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("pool tiny did not reach %d warm VMs within %s: %+v", n, refillWithin, p)
}

// waitGone waits until the API no longer lists vm.
func (f *faultFarm) waitGone(t *testing.T, vm string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		vms, err := f.c.ListVMs(context.Background())
		if err == nil && !slices.ContainsFunc(vms, func(v api.VM) bool { return v.ID == vm }) {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("VM %s is still listed %s after its fault", vm, within)
}

// waitEpisodeOver waits until the episode is no longer active: ended, or
// gone from the API.
func (f *faultFarm) waitEpisodeOver(t *testing.T, id string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	var ep api.Episode
	var err error
	for time.Now().Before(deadline) {
		ep, err = f.c.GetEpisode(context.Background(), id)
		if err != nil && (api.IsCode(err, api.CodeEpisodeNotFound) || api.IsCode(err, api.CodeEpisodeEnded)) {
			return
		}
		if err == nil && ep.State == api.EpisodeEnded {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("episode %s still %q (err %v) %s after its VM's fault", id, ep.State, err, within)
}

func (f *faultFarm) start(t *testing.T) api.Episode {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), refillWithin)
	defer cancel()
	ep, err := f.c.StartEpisode(ctx, api.StartEpisodeRequest{Pool: "tiny"})
	if err != nil {
		t.Fatalf("start an episode: %v", err)
	}
	return ep
}

func (f *faultFarm) end(t *testing.T, id string) api.Episode {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ep, err := f.c.EndEpisode(ctx, id)
	if err != nil {
		t.Fatalf("end episode %s: %v", id, err)
	}
	return ep
}

// exec runs argv in the episode's guest and fails t unless it exits 0.
func (f *faultFarm) exec(t *testing.T, ep string, timeout time.Duration, argv ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout+30*time.Second)
	defer cancel()
	res, err := f.c.Exec(ctx, client.Episode(ep), api.ExecRequest{Argv: argv, TimeoutS: timeout.Seconds()})
	if err != nil {
		t.Fatalf("exec %q on episode %s: %v", argv, ep, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("exec %q on episode %s: exit %d, stderr %q", argv, ep, res.ExitCode, res.Stderr)
	}
	return res.Stdout
}

func (f *faultFarm) act(t *testing.T, ep string, action string) api.ActionsResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := f.c.Act(ctx, client.Episode(ep), api.ActionsRequest{Action: []byte(action)})
	if err != nil {
		t.Fatalf("action %s on episode %s: %v", action, ep, err)
	}
	return res
}

func errCode(err error) string {
	if e, ok := errors.AsType[*api.Error](err); ok {
		return e.Code
	}
	return ""
}

// TestHostFaultsE2E restarts the host's libvirtd (LibvirtdRestarted),
// which every farm on the host sees: scripts/test.sh runs tests named
// *HostFaultsE2E alone, after the other E2E tests (in a CI run beside
// them, the restart cut an images test's guest call short).
func TestHostFaultsE2E(t *testing.T) {
	f := startFaultFarm(t)

	t.Run("AgentNeverAnswers", func(t *testing.T) { testAgentNeverAnswers(t, f) })
	t.Run("QEMUKilledMidAction", func(t *testing.T) { testQEMUKilled(t, f) })
	t.Run("GuestPowersOff", func(t *testing.T) { testGuestPowerOff(t, f) })
	t.Run("LibvirtdRestarted", func(t *testing.T) { testLibvirtdRestart(t, f) })
	t.Run("ServeKilled", func(t *testing.T) { testServeKilled(t, f) })
	if !t.Failed() {
		f.waitWarm(t, 1)
		p := f.pool(t)
		if p.Leased != 0 {
			t.Errorf("pool after the faults: %d leased, want 0 (%+v)", p.Leased, p)
		}
	}
}

// A command outliving its timeout, and then a guest agent that is stopped
// outright: each request ends with code timeout, and a second VM's exec
// answers promptly meanwhile.
func testAgentNeverAnswers(t *testing.T, f *faultFarm) {
	a, b := f.start(t), f.start(t)
	t.Cleanup(func() { f.c.EndEpisode(context.Background(), a.ID); f.c.EndEpisode(context.Background(), b.ID) })

	// other checks that b's guest answers within a few seconds while a's
	// request hangs.
	other := func(during string) {
		t0 := time.Now()
		out := f.exec(t, b.ID, 10*time.Second, "echo", "alive")
		if el := time.Since(t0); el > 8*time.Second || strings.TrimSpace(out) != "alive" {
			t.Errorf("%s: episode %s's exec answered %q after %s; want alive, promptly", during, b.ID, out, el)
		}
	}
	hung := func(what string, timeout time.Duration, argv ...string) {
		t.Helper()
		errc := make(chan error, 1)
		t0 := time.Now()
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Minute)
			defer cancel()
			_, err := f.c.Exec(ctx, client.Episode(a.ID), api.ExecRequest{Argv: argv, TimeoutS: timeout.Seconds()})
			errc <- err
		}()
		time.Sleep(500 * time.Millisecond)
		other(what)
		err := <-errc
		el := time.Since(t0)
		if !api.IsCode(err, api.CodeTimeout) {
			t.Fatalf("%s: exec %q with timeout_s %g: err %v (code %q), want code %q", what, argv, timeout.Seconds(), err, errCode(err), api.CodeTimeout)
		}
		if el > timeout+20*time.Second {
			t.Errorf("%s: the timeout error came after %s, for timeout_s %g", what, el, timeout.Seconds())
		}
		t.Logf("%s: %v after %s", what, err, el.Round(time.Millisecond))
	}

	hung("a command that outlives its timeout", 3*time.Second, "sleep", "60")

	// Stop qemu-ga from a detached shell, after the exec that starts it has
	// reported back; from then on the agent reads nothing.
	f.exec(t, a.ID, 10*time.Second, "sh", "-c", "(sleep 1; kill -STOP $(pidof qemu-ga)) </dev/null >/dev/null 2>&1 &")
	time.Sleep(2 * time.Second)
	hung("a stopped guest agent", 5*time.Second, "true")
	other("after the stopped agent's timeout")

	// Ending the episode resets a to its ready state, where qemu-ga runs;
	// or replaces it. Either way the pool is whole again.
	end := f.end(t, a.ID)
	t.Logf("episode %s ended after the stopped agent: reset %.2fs, replaced %v", a.ID, end.ResetSeconds, end.VMReplaced)
	f.end(t, b.ID)
	f.waitWarm(t, 1)
}

// QEMU killed with SIGKILL while a 300-character type action runs.
func testQEMUKilled(t *testing.T, f *faultFarm) {
	ep := f.start(t)
	t.Cleanup(func() { f.c.EndEpisode(context.Background(), ep.ID) })
	f.act(t, ep.ID, `{"kind":"click","x":200,"y":200}`)
	vm, err := f.c.GetVM(context.Background(), ep.VM)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := farmproc.QEMUPid(vm.Domain)
	if err != nil {
		t.Fatalf("QEMU pid of %s: %v", vm.Domain, err)
	}

	errc := make(chan error, 1)
	t0 := time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		text := strings.Repeat("the quick brown fox ", 15) // 300 characters
		_, err := f.c.Act(ctx, client.Episode(ep.ID), api.ActionsRequest{Action: []byte(`{"kind":"type","text":"` + text + `"}`)})
		errc <- err
	}()
	time.Sleep(1500 * time.Millisecond)
	select {
	case err := <-errc:
		t.Fatalf("the type action ended before QEMU was killed (after %s): %v; it must last longer for this test", time.Since(t0), err)
	default:
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 QEMU %d: %v", pid, err)
	}
	killed := time.Now()
	err = <-errc
	t.Logf("the type action ended %s after the kill: %v", time.Since(killed).Round(time.Millisecond), err)
	if err == nil {
		t.Fatal("the type action succeeded although QEMU was killed under it")
	}
	// Which code depends on who hears of the death first (the display, the
	// VM layer, or the pool ending the episode); each is documented, and
	// the message must say the VM died and name it.
	switch c := errCode(err); c {
	case api.CodeVMDead, api.CodeDisplayClosed, api.CodeNotRunning, api.CodeEpisodeEnded:
	default:
		t.Errorf("type under a killed QEMU: code %q (%v); want vm_dead, display_closed, not_running or episode_ended", c, err)
	}
	if !strings.Contains(err.Error(), ep.VM) || !strings.Contains(err.Error(), "died") {
		t.Errorf("the error does not say VM %s died: %v", ep.VM, err)
	}
	if el := time.Since(killed); el > 15*time.Second {
		t.Errorf("the error came %s after the kill", el)
	}
	f.waitEpisodeOver(t, ep.ID, 30*time.Second)
	f.waitGone(t, ep.VM, 30*time.Second)
	f.waitWarm(t, 1)
	// The replacement works.
	next := f.start(t)
	if next.VM == ep.VM {
		t.Errorf("the next episode got the dead VM %s", ep.VM)
	}
	f.exec(t, next.ID, 10*time.Second, "true")
	f.end(t, next.ID)
}

// A guest that powers itself off: busybox's poweroff -f in tiny calls
// reboot(2) at once (no init involved), as `systemctl poweroff` ends a
// desktop guest.
func testGuestPowerOff(t *testing.T, f *faultFarm) {
	ep := f.start(t)
	t.Cleanup(func() { f.c.EndEpisode(context.Background(), ep.ID) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The exec may answer before the guest is gone, or fail with it.
	_, err := f.c.Exec(ctx, client.Episode(ep.ID), api.ExecRequest{Argv: []string{"sh", "-c", "sleep 0.5; poweroff -f"}, TimeoutS: 20})
	t.Logf("exec poweroff -f: %v", err)
	f.waitEpisodeOver(t, ep.ID, 30*time.Second)
	f.waitGone(t, ep.VM, 30*time.Second)
	_, err = f.c.Exec(context.Background(), client.Episode(ep.ID), api.ExecRequest{Argv: []string{"true"}})
	if err == nil {
		t.Errorf("exec on the powered-off episode %s succeeded", ep.ID)
	}
	f.waitWarm(t, 1)
}

// libvirtd restarted under the farm: it runs without systemd here
// (scripts/setup-host.sh starts it with -d and it writes /run/libvirtd.pid).
func testLibvirtdRestart(t *testing.T, f *faultFarm) {
	ep := f.start(t)
	t.Cleanup(func() { f.c.EndEpisode(context.Background(), ep.ID) })
	f.exec(t, ep.ID, 10*time.Second, "true")

	// While libvirtd is down the farm says so on /healthz, naming it; once
	// it is back, ok again.
	restartLibvirtd(t, func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, err := f.c.Health(context.Background())
			if api.IsCode(err, api.CodeHypervisorDown) && strings.Contains(err.Error(), "libvirtd at ") && strings.Contains(err.Error(), "HTTP 503") {
				t.Logf("healthz with libvirtd down: %v", err)
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("healthz 10 s after libvirtd stopped: %v; want %s, HTTP 503, naming libvirtd", err, api.CodeHypervisorDown)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	hdeadline := time.Now().Add(30 * time.Second)
	for {
		_, err := f.c.Health(context.Background())
		if err == nil {
			break
		}
		if time.Now().After(hdeadline) {
			t.Fatalf("healthz 30 s after libvirtd restarted: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// The farm reconnects in the background; give it a moment, bounded.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := f.c.Exec(context.Background(), client.Episode(ep.ID), api.ExecRequest{Argv: []string{"true"}, TimeoutS: 10})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("exec 30 s after libvirtd restarted: %v", err)
		}
		time.Sleep(time.Second)
	}
	out := f.exec(t, ep.ID, 10*time.Second, "echo", "after-restart")
	if strings.TrimSpace(out) != "after-restart" {
		t.Errorf("exec after libvirtd restarted: %q", out)
	}
	res := f.act(t, ep.ID, `{"kind":"type","text":"hi"}`)
	if res.Executed != 1 {
		t.Errorf("type after libvirtd restarted: executed %d", res.Executed)
	}
	if _, err := f.c.ResetVM(context.Background(), ep.VM); err != nil {
		t.Errorf("reset VM %s after libvirtd restarted: %v", ep.VM, err)
	}
	f.exec(t, ep.ID, 10*time.Second, "true")
	end := f.end(t, ep.ID)
	if end.VMReplaced {
		t.Errorf("episode %s's VM was replaced at its end after libvirtd restarted; want a reset", ep.ID)
	}
	next := f.start(t)
	f.exec(t, next.ID, 10*time.Second, "true")
	f.end(t, next.ID)
}

// restartLibvirtd stops libvirtd, runs whileDown, and starts it again.
func restartLibvirtd(t *testing.T, whileDown func()) {
	t.Helper()
	if _, err := os.Stat("/run/systemd/system"); err == nil {
		if out, err := exec.Command("systemctl", "stop", "libvirtd").CombinedOutput(); err != nil {
			t.Fatalf("systemctl stop libvirtd: %v: %s", err, out)
		}
		whileDown()
		if out, err := exec.Command("systemctl", "start", "libvirtd").CombinedOutput(); err != nil {
			t.Fatalf("systemctl start libvirtd: %v: %s", err, out)
		}
		return
	}
	b, err := os.ReadFile("/run/libvirtd.pid")
	if err != nil {
		t.Fatalf("libvirtd pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("libvirtd pid file: %q", b)
	}
	// SIGTERM: libvirtd leaves its QEMUs running and reconnects to them on
	// start.
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatalf("stop libvirtd %d: %v", pid, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("libvirtd %d still runs 30 s after SIGTERM", pid)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Log("libvirtd stopped")
	time.Sleep(time.Second) // the farm sees it gone, and tries to redial
	whileDown()
	if out, err := exec.Command("libvirtd", "-d").CombinedOutput(); err != nil {
		t.Fatalf("start libvirtd: %v: %s", err, out)
	}
	var err2 error
	for i := 0; i < 100; i++ {
		if _, err2 = farmproc.Domains(faultsStateDir); err2 == nil {
			t.Log("libvirtd started again")
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("libvirtd does not answer 10 s after it was started: %v", err2)
}

// deskfarm serve killed with SIGKILL mid-episode, then started again on
// the same state dir.
func testServeKilled(t *testing.T, f *faultFarm) {
	ep := f.start(t)
	f.exec(t, ep.ID, 10*time.Second, "sh", "-c", "echo "+ep.ID+" > /run/mark")
	f.waitWarm(t, 1) // the pool boots nothing while serve dies

	if err := f.Kill9(); err != nil {
		t.Fatal(err)
	}
	if err := f.Restart(context.Background()); err != nil {
		t.Fatalf("restart serve: %v", err)
	}

	eps, err := f.c.ListEpisodes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(eps, func(e api.Episode) bool { return e.ID == ep.ID })
	if i < 0 {
		t.Fatalf("episode %s is not listed after serve restarted: %+v", ep.ID, eps)
	}
	if got := eps[i]; got.VM != ep.VM || got.State != api.EpisodeActive {
		t.Errorf("after serve restarted, episode %s is on VM %s in state %q; want VM %s, active", ep.ID, got.VM, got.State, ep.VM)
	}
	// Same guest: it still holds what the episode wrote.
	if out := f.exec(t, ep.ID, 10*time.Second, "cat", "/run/mark"); strings.TrimSpace(out) != ep.ID {
		t.Errorf("after serve restarted, /run/mark in episode %s's guest holds %q; want %q (same VM, not reset)", ep.ID, out, ep.ID)
	}
	if res := f.act(t, ep.ID, `{"kind":"key","keys":["Return"]}`); res.Executed != 1 {
		t.Errorf("key after serve restarted: executed %d", res.Executed)
	}

	// No duplicate or orphan: once the pool is steady, libvirt's domains,
	// the API's VMs and the VM directories are the same set.
	f.waitWarm(t, 1)
	checkOneToOne(t, f)
	f.end(t, ep.ID)
	f.waitWarm(t, 1)
	checkOneToOne(t, f)
}

// checkOneToOne fails t unless the API's VMs, the state dir's domains and
// its VM directories match one to one.
func checkOneToOne(t *testing.T, f *faultFarm) {
	t.Helper()
	vms, err := f.c.ListVMs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var apiDoms, apiIDs []string
	for _, v := range vms {
		apiDoms, apiIDs = append(apiDoms, v.Domain), append(apiIDs, v.ID)
	}
	doms, err := farmproc.Domains(faultsStateDir)
	if err != nil {
		t.Fatal(err)
	}
	dirs, err := farmproc.VMDirs(faultsStateDir)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(apiDoms)
	slices.Sort(apiIDs)
	slices.Sort(doms)
	slices.Sort(dirs)
	if !slices.Equal(apiDoms, doms) || !slices.Equal(apiIDs, dirs) {
		t.Errorf("VMs the API lists %v, libvirt domains %v, VM dirs %v: want one each", apiIDs, doms, dirs)
	}
	p := f.pool(t)
	if n := p.Warm + p.Leased + p.Booting + p.Ending; n != len(vms) {
		t.Errorf("pool counts %d VMs (%+v), the API lists %d", n, p, len(vms))
	}
}
