package vmm

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"

	"github.com/deskfarm/deskfarm/internal/fielderr"
)

// These tests run Manager on fakeHV: Create, Reset, recovery, admission and
// lifecycle events, with every libvirt and guest failure they handle. Only
// the overlay is real (qemu-img on a small base image in a temp dir).

type testImages struct{ img BaseImage }

func (t testImages) Resolve(name string) (BaseImage, error) { return t.img, nil }

type testFarm struct {
	m   *Manager
	hv  *fakeHV
	dir string
	evs <-chan Event
}

func newTestFarm(t *testing.T, hv *fakeHV, tweak func(*Config)) *testFarm {
	t.Helper()
	if _, err := exec.LookPath("qemu-img"); err != nil {
		t.Skip("qemu-img not installed: the overlay step needs it")
	}
	dir := t.TempDir()
	base := filepath.Join(dir, "base.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", base, "16M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img: %v: %s", err, out)
	}
	state := filepath.Join(dir, "state")
	if err := prepareStateDir(state); err != nil {
		t.Fatal(err)
	}
	cfg := Config{StateDir: state, Images: testImages{BaseImage{Name: "tiny", Hash: "abc", Build: "b1", Disk: base, Kernel: "/k", Initrd: "/i"}},
		BootTimeout: 2 * time.Second, AgentTimeout: 2 * time.Second, QEMUPidDir: hv.pidDir,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if cfg.QEMUPidDir == "" {
		cfg.QEMUPidDir = filepath.Join(dir, "no-pids")
	}
	if tweak != nil {
		tweak(&cfg)
	}
	cfg.setDefaults()
	m, err := newManager(context.Background(), cfg, hv, "tcg", -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &testFarm{m: m, hv: hv, dir: state, evs: m.Subscribe(ctx, "test")}
	t.Cleanup(func() { cancel(); m.Close() })
	return f
}

// next returns the next event, failing after a second.
func (f *testFarm) next(t *testing.T) Event {
	t.Helper()
	select {
	case ev := <-f.evs:
		return ev
	case <-time.After(time.Second):
		t.Fatal("no event within 1 s")
		return Event{}
	}
}

// noEvent checks nothing more is published for a moment.
func (f *testFarm) noEvent(t *testing.T) {
	t.Helper()
	select {
	case ev := <-f.evs:
		t.Fatalf("unexpected event %s (%s) of vm %s", ev.Kind, ev.Reason, ev.VM.ID)
	case <-time.After(50 * time.Millisecond):
	}
}

// assertEmpty checks the farm holds nothing: no VM, domain, directory or memory.
func (f *testFarm) assertEmpty(t *testing.T) {
	t.Helper()
	if vms, _ := f.m.List(context.Background()); len(vms) != 0 {
		t.Errorf("vms left: %+v", vms)
	}
	if names := f.hv.domainNames(); len(names) != 0 {
		t.Errorf("domains left: %v", names)
	}
	if entries, _ := os.ReadDir(filepath.Join(f.dir, "vms")); len(entries) != 0 {
		t.Errorf("vm dirs left: %v", entries)
	}
	if used, _ := f.m.Capacity(); used != 0 {
		t.Errorf("capacity still counts %d MiB", used)
	}
}

var tinyOpts = CreateOptions{Image: "tiny", MemoryMiB: 256, VCPUs: 1, Boot: true}

func TestCreateReady(t *testing.T) {
	f := newTestFarm(t, newFakeHV(), nil)
	vm, err := f.m.Create(context.Background(), CreateOptions{Image: "tiny", MemoryMiB: 256, VCPUs: 1, Labels: map[string]string{"pool": "p1"}})
	if err != nil {
		t.Fatal(err)
	}
	if vm.State != StateReady || vm.Start != StartBoot || vm.Labels["pool"] != "p1" {
		t.Fatalf("vm = %+v", vm)
	}
	if ev := f.next(t); ev.Kind != EventCreated || ev.VM.ID != vm.ID {
		t.Fatalf("first event %+v", ev)
	}
	if ev := f.next(t); ev.Kind != EventReady || ev.VM.State != StateReady {
		t.Fatalf("second event %+v", ev)
	}
	if used, _ := f.m.Capacity(); used != 256 {
		t.Fatalf("capacity used = %d, want 256", used)
	}
	// The ready state was saved: the next VM like it starts from it.
	vm2, err := f.m.Create(context.Background(), CreateOptions{Image: "tiny", MemoryMiB: 256, VCPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	if vm2.Start != StartSavedState {
		t.Fatalf("second vm started by %s", vm2.Start)
	}
	for _, id := range []string{vm.ID, vm2.ID} {
		if err := f.m.Destroy(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	}
	f.assertEmpty(t)
}

// Each step failing undoes exactly the steps before it: no domain, no
// directory, no memory left, and EventDestroyed follows EventCreated.
func TestCreateStepFailureLeavesNothing(t *testing.T) {
	errInjected := errors.New("injected")
	cases := []struct {
		step    string
		setup   func(hv *fakeHV, f *testFarm)
		want    error
		defined bool
		undone  []string // libvirt undo calls expected, in order
	}{
		{step: "overlay", setup: func(hv *fakeHV, f *testFarm) {
			f.m.cfg.Images = testImages{BaseImage{Name: "tiny", Disk: filepath.Join(f.dir, "missing.qcow2")}}
		}, want: ErrBrokenImage},
		{step: "define", setup: func(hv *fakeHV, _ *testFarm) { hv.fail["define"] = errInjected }, want: errInjected},
		{step: "start", setup: func(hv *fakeHV, _ *testFarm) { hv.fail["start"] = errInjected }, want: errInjected,
			defined: true, undone: []string{"undefine"}},
		{step: "wait-display", setup: func(hv *fakeHV, f *testFarm) { hv.noReady = true; f.m.cfg.BootTimeout = 100 * time.Millisecond },
			want: ErrTimeout, defined: true, undone: []string{"destroy", "undefine"}},
		{step: "wait-agent", setup: func(hv *fakeHV, f *testFarm) {
			hv.fail["agent:guest-ping"] = errInjected
			f.m.cfg.AgentTimeout = 100 * time.Millisecond
		}, want: ErrTimeout, defined: true, undone: []string{"destroy", "undefine"}},
		{step: "snapshot", setup: func(hv *fakeHV, _ *testFarm) { hv.fail["hmp:savevm"] = errInjected }, want: errInjected,
			defined: true, undone: []string{"destroy", "undefine"}},
		{step: "mark-ready", setup: func(hv *fakeHV, _ *testFarm) { hv.fail["metadata"] = errInjected }, want: errInjected,
			defined: true, undone: []string{"destroy", "undefine"}},
	}
	for _, c := range cases {
		t.Run(c.step, func(t *testing.T) {
			hv := newFakeHV()
			f := newTestFarm(t, hv, nil)
			c.setup(hv, f)
			_, err := f.m.Create(context.Background(), tinyOpts)
			if err == nil {
				t.Fatal("create succeeded")
			}
			if c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
			if !containsStep(err, c.step) {
				t.Fatalf("err = %v, does not name step %s", err, c.step)
			}
			f.assertEmpty(t)
			var undone []string
			hv.mu.Lock()
			for _, call := range hv.calls {
				if call == "destroy" || call == "undefine" {
					undone = append(undone, call)
				}
			}
			hv.mu.Unlock()
			if !slices.Equal(undone, c.undone) {
				t.Errorf("undo calls %v, want %v", undone, c.undone)
			}
			if c.defined {
				if ev := f.next(t); ev.Kind != EventCreated {
					t.Fatalf("event %+v, want created", ev)
				}
				if ev := f.next(t); ev.Kind != EventDestroyed || ev.Reason != "create failed" {
					t.Fatalf("event %+v, want destroyed", ev)
				}
			}
			f.noEvent(t)
		})
	}
}

// containsStep reports whether err says it failed in step (runSteps
// prefixes the failure with the step's name).
func containsStep(err error, step string) bool {
	return strings.Contains(err.Error(), ": "+step+": ")
}

// Restoring from a saved ready state that QEMU refuses unwinds too.
func TestCreateRestoreFailure(t *testing.T) {
	hv := newFakeHV()
	f := newTestFarm(t, hv, nil)
	vm, err := f.m.Create(context.Background(), tinyOpts)
	if err != nil {
		t.Fatal(err)
	}
	hv.hmp["loadvm"] = readHMPCapture(t, "loadvm-missing")
	_, err = f.m.Create(context.Background(), CreateOptions{Image: "tiny", MemoryMiB: 256, VCPUs: 1})
	if err == nil || !containsStep(err, "restore") {
		t.Fatalf("create from a bad saved state: %v", err)
	}
	if vms, _ := f.m.List(context.Background()); len(vms) != 1 || vms[0].ID != vm.ID {
		t.Fatalf("vms after failed create: %+v", vms)
	}
	if err := f.m.Destroy(context.Background(), vm.ID); err != nil {
		t.Fatal(err)
	}
	f.assertEmpty(t)
}

// A reset whose loadvm fails leaves the VM broken, announced once.
func TestResetLoadvmFailureBreaksVM(t *testing.T) {
	hv := newFakeHV()
	f := newTestFarm(t, hv, nil)
	vm, err := f.m.Create(context.Background(), tinyOpts)
	if err != nil {
		t.Fatal(err)
	}
	f.next(t)
	f.next(t)
	if _, err := f.m.Reset(context.Background(), vm.ID); err != nil {
		t.Fatalf("good reset: %v", err)
	}
	if ev := f.next(t); ev.Kind != EventReset || ev.VM.Resets != 1 {
		t.Fatalf("event %+v, want reset", ev)
	}
	hv.hmp["loadvm"] = readHMPCapture(t, "loadvm-missing")
	_, err = f.m.Reset(context.Background(), vm.ID)
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("reset with failing loadvm: %v", err)
	}
	ev := f.next(t)
	if ev.Kind != EventDied || ev.VM.State != StateBroken || !strings.Contains(ev.Reason, "loadvm failed") {
		t.Fatalf("event %+v, want died", ev)
	}
	got, _ := f.m.Get(context.Background(), vm.ID)
	if got.State != StateBroken {
		t.Fatalf("state %s, want broken", got.State)
	}
	if _, err := f.m.Reset(context.Background(), vm.ID); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("reset of a broken vm: %v", err)
	}
	f.noEvent(t)
}

// A reset returns once loadvm and the clock are done, without waiting for
// libvirt to reopen its agent connection; an agent call made meanwhile waits
// for the reopen: a ping answered on the connection loadvm is about to make
// libvirt close does not let it through (the exec would fail "guest agent
// disappeared"), only libvirt's "connected" and a ping on the new connection
// do. The agent-event subscription ends with the reopen.
func TestResetAgentCallsWaitForReconnect(t *testing.T) {
	hv, f, vm := resetHeldAgent(t)
	if hv.agentSubscriptions() != 1 {
		t.Fatalf("%d agent-event subscriptions after the reset, want 1 (the reopen's)", hv.agentSubscriptions())
	}
	done := make(chan error, 1)
	go func() {
		_, err := f.m.Exec(context.Background(), vm.ID, ExecRequest{Argv: []string{"true"}})
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("exec returned (%v) before libvirt closed and reopened its agent connection", err)
	case <-time.After(300 * time.Millisecond):
	}
	hv.agentLifecycle(vm.Domain, agentDisconnected)
	select {
	case err := <-done:
		t.Fatalf("exec returned (%v) while libvirt's agent connection was closed", err)
	case <-time.After(100 * time.Millisecond):
	}
	hv.mu.Lock()
	sentBefore := len(hv.agentCmds)
	hv.mu.Unlock()
	hv.agentLifecycle(vm.Domain, agentConnected)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exec after the reconnect: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("exec did not run after the agent reconnected")
	}
	hv.mu.Lock()
	after := slices.Clone(hv.agentCmds[sentBefore:])
	hv.mu.Unlock()
	ping := slices.IndexFunc(after, func(c string) bool { return strings.Contains(c, "guest-ping") })
	exec := slices.IndexFunc(after, func(c string) bool { return strings.Contains(c, `"guest-exec"`) })
	if ping < 0 || exec < ping {
		t.Fatalf("agent commands after the reconnect %q, want a ping on the new connection, then the exec", after)
	}
	waitFor(t, func() bool { return hv.agentSubscriptions() == 0 })
	// The next reset starts from an open gate.
	if _, err := f.m.Reset(context.Background(), vm.ID); err != nil {
		t.Fatalf("second reset: %v", err)
	}
	hv.agentLifecycle(vm.Domain, agentConnected)
	if _, err := f.m.Exec(context.Background(), vm.ID, ExecRequest{Argv: []string{"true"}}); err != nil {
		t.Fatalf("exec after the second reset: %v", err)
	}
}

// resetHeldAgent creates a VM on a fake whose agent events are played by
// hand, and resets it: libvirt's reopen of the agent is pending.
func resetHeldAgent(t *testing.T) (*fakeHV, *testFarm, VM) {
	t.Helper()
	hv := newFakeHV()
	hv.holdAgentEvents = true
	f := newTestFarm(t, hv, func(c *Config) { c.AgentTimeout = 5 * time.Second })
	vm, err := f.m.Create(context.Background(), tinyOpts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.m.Reset(context.Background(), vm.ID); err != nil {
		t.Fatalf("reset: %v (it must not wait for the agent's reconnect)", err)
	}
	return hv, f, vm
}

// An agent call waiting for the reopen gives up with its own ctx.
func TestResetAgentCallHonoursContext(t *testing.T) {
	hv, f, vm := resetHeldAgent(t)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := f.m.Exec(ctx, vm.ID, ExecRequest{Argv: []string{"true"}})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "reopen its connection after a reset") {
		t.Fatalf("exec cut short while the agent reopens: %v", err)
	}
	hv.agentLifecycle(vm.Domain, agentConnected)
}

// Without agent events (a libvirt that refuses the subscription) a reset
// still ends, on pings alone.
func TestResetWithoutAgentEvents(t *testing.T) {
	hv := newFakeHV()
	hv.fail["agentevents"] = errors.New("fake: no agent lifecycle events")
	f := newTestFarm(t, hv, nil)
	vm, err := f.m.Create(context.Background(), tinyOpts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.m.Reset(context.Background(), vm.ID); err != nil {
		t.Fatalf("reset: %v", err)
	}
}

func hasCall(hv *fakeHV, name string) bool {
	hv.mu.Lock()
	defer hv.mu.Unlock()
	return slices.Contains(hv.calls, name)
}

// waitFor polls cond for up to two seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 2 s")
		}
	}
}

// A reset cut short by ctx while loadvm runs returns at once, and the VM,
// whose guest state is now unknown, is broken.
func TestResetHonoursContext(t *testing.T) {
	hv := newFakeHV()
	f := newTestFarm(t, hv, nil)
	vm, err := f.m.Create(context.Background(), tinyOpts)
	if err != nil {
		t.Fatal(err)
	}
	hv.mu.Lock()
	hv.block["hmp:loadvm"] = make(chan struct{})
	hv.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = f.m.Reset(ctx, vm.ID)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > time.Second {
		t.Fatalf("reset under a 100 ms ctx: %v after %s", err, time.Since(start))
	}
	if got, _ := f.m.Get(context.Background(), vm.ID); got.State != StateBroken {
		t.Fatalf("state %s, want broken", got.State)
	}
}

// A VM whose QEMU dies is broken and announced within the event's latency,
// with a reason a user understands; its memory is free again.
func TestDiedFromLifecycleEvent(t *testing.T) {
	cases := map[libvirt.DomainEventStoppedDetailType]string{
		libvirt.DomainEventStoppedFailed:    "qemu crashed or was killed",
		libvirt.DomainEventStoppedShutdown:  "guest powered off",
		libvirt.DomainEventStoppedDestroyed: "destroyed outside deskfarm",
	}
	for detail, reason := range cases {
		t.Run(reason, func(t *testing.T) {
			hv := newFakeHV()
			f := newTestFarm(t, hv, func(c *Config) { c.MemoryLimitMiB = 300 })
			vm, err := f.m.Create(context.Background(), tinyOpts)
			if err != nil {
				t.Fatal(err)
			}
			f.next(t)
			f.next(t)
			hv.kill(vm.Domain, detail)
			ev := f.next(t)
			if ev.Kind != EventDied || ev.Reason != reason || ev.VM.ID != vm.ID || ev.VM.State != StateBroken {
				t.Fatalf("event %+v, want died: %s", ev, reason)
			}
			if got, _ := f.m.Get(context.Background(), vm.ID); got.State != StateBroken {
				t.Fatalf("state %s", got.State)
			}
			if used, _ := f.m.Capacity(); used != 0 {
				t.Fatalf("dead vm still counts %d MiB", used)
			}
			_, err = f.m.Exec(context.Background(), vm.ID, ExecRequest{Argv: []string{"true"}})
			if !errors.Is(err, ErrDead) || !errors.Is(err, ErrNotRunning) || !strings.Contains(err.Error(), reason) {
				t.Fatalf("exec on the dead vm: %v", err)
			}
			f.noEvent(t)
			// Destroy removes what is left and ends its life as usual.
			if err := f.m.Destroy(context.Background(), vm.ID); err != nil {
				t.Fatal(err)
			}
			if ev := f.next(t); ev.Kind != EventDestroyed {
				t.Fatalf("event %+v, want destroyed", ev)
			}
			f.noEvent(t) // deskfarm's own destroy is no death
			f.assertEmpty(t)
		})
	}
}

// Events lost while libvirt was disconnected are made up for by a resync.
func TestResyncAfterReconnect(t *testing.T) {
	hv := newFakeHV()
	f := newTestFarm(t, hv, nil)
	a, err := f.m.Create(context.Background(), tinyOpts)
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.m.Create(context.Background(), tinyOpts)
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		f.next(t)
	}
	hv.mu.Lock()
	hv.doms[a.Domain].stopLocked() // no event: the connection was down
	delete(hv.doms, b.Domain)
	hv.evs <- domainEvent{Resync: true}
	hv.mu.Unlock()
	died := map[string]string{}
	for range 2 {
		ev := f.next(t)
		if ev.Kind != EventDied {
			t.Fatalf("event %+v, want died", ev)
		}
		died[ev.VM.ID] = ev.Reason
	}
	want := map[string]string{a.ID: "stopped while libvirt was disconnected (libvirt state 5)", b.ID: "undefined while libvirt was disconnected"}
	if !reflect.DeepEqual(died, want) {
		t.Fatalf("died %v, want %v", died, want)
	}
}

// Admission counts the guest memory of VMs alive against the limit.
func TestAdmission(t *testing.T) {
	hv := newFakeHV()
	f := newTestFarm(t, hv, func(c *Config) { c.MemoryLimitMiB = 600 })
	if used, limit := f.m.Capacity(); used != 0 || limit != 600 {
		t.Fatalf("capacity %d/%d", used, limit)
	}
	a, err := f.m.Create(context.Background(), tinyOpts)
	if err != nil {
		t.Fatal(err)
	}
	opts := tinyOpts
	opts.MemoryMiB = 400
	_, err = f.m.Create(context.Background(), opts)
	if !errors.Is(err, ErrInsufficientResources) || fielderr.Field(err) != "memory_mib" {
		t.Fatalf("over the limit: %v", err)
	}
	opts.MemoryMiB = 700
	if _, err = f.m.Create(context.Background(), opts); !errors.Is(err, ErrInsufficientResources) || fielderr.Field(err) != "memory_mib" {
		t.Fatalf("bigger than the limit: %v", err)
	}
	if err := f.m.Destroy(context.Background(), a.ID); err != nil {
		t.Fatal(err)
	}
	opts.MemoryMiB = 400
	if _, err := f.m.Create(context.Background(), opts); err != nil {
		t.Fatalf("after destroy: %v", err)
	}

	// The default limit is the host's memory less the reserve.
	f2 := newTestFarm(t, newFakeHV(), nil)
	if _, limit := f2.m.Capacity(); limit != 16<<10-DefaultMemoryReserveMiB {
		t.Fatalf("default limit %d", limit)
	}
}

// Recovery adopts ready running VMs with their labels, removes half-made
// and stopped ones and orphan directories, and leaves other farms' domains.
func TestRecover(t *testing.T) {
	hv := newFakeHV()
	f := newTestFarm(t, hv, nil)
	vmsDir := filepath.Join(f.dir, "vms")
	f.m.Close()

	mk := func(id string, st State, dir string) metadata {
		return metadata{machineSpec: machineSpec{ID: id, Image: "tiny", Dir: dir, MemoryMiB: 256, VCPUs: 1, Width: 1280, Height: 800}, State: st}
	}
	ready := mk("aaaa", StateReady, filepath.Join(vmsDir, "aaaa"))
	ready.Labels = setLabel(setLabel(ready.Labels, "pool", "p1"), "lease", "l-7")
	hv2 := newFakeHV()
	hv2.addDomain(ready, libvirt.DomainRunning)
	hv2.addDomain(mk("bbbb", StateCreating, filepath.Join(vmsDir, "bbbb")), libvirt.DomainRunning)
	hv2.addDomain(mk("cccc", StateReady, filepath.Join(vmsDir, "cccc")), libvirt.DomainShutoff)
	hv2.addDomain(mk("dddd", StateReady, "/var/lib/other-farm/vms/dddd"), libvirt.DomainRunning)
	for _, d := range []string{"aaaa", "bbbb", "cccc", "eeee"} {
		os.MkdirAll(filepath.Join(vmsDir, d), 0o750)
		os.WriteFile(filepath.Join(vmsDir, d, "disk.qcow2"), nil, 0o600)
	}

	cfg := f.m.cfg
	m, err := newManager(context.Background(), cfg, hv2, "tcg", -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	vms, _ := m.List(context.Background())
	if len(vms) != 1 || vms[0].ID != "aaaa" || vms[0].State != StateReady ||
		!reflect.DeepEqual(vms[0].Labels, map[string]string{"pool": "p1", "lease": "l-7"}) {
		t.Fatalf("adopted %+v", vms)
	}
	names := hv2.domainNames()
	slices.Sort(names)
	if !slices.Equal(names, []string{"deskfarm-aaaa", "deskfarm-dddd"}) {
		t.Fatalf("domains after recovery %v", names)
	}
	entries, _ := os.ReadDir(vmsDir)
	if len(entries) != 1 || entries[0].Name() != "aaaa" {
		t.Fatalf("dirs after recovery %v", entries)
	}
	if used, _ := m.Capacity(); used != 256 {
		t.Fatalf("adopted memory %d", used)
	}
}

func readHMPCapture(t *testing.T, name string) string {
	t.Helper()
	c, ok := hmpCaptures(t)[name]
	if !ok {
		t.Fatalf("no HMP capture %q in testdata", name)
	}
	return c.Output
}

// Nothing of a VM is readable by other host users: not its disk, sockets or
// console, nor the saved ready states holding guest RAM.
func TestFileModes(t *testing.T) {
	f := newTestFarm(t, newFakeHV(), nil)
	vm, err := f.m.Create(context.Background(), tinyOpts)
	if err != nil {
		t.Fatal(err)
	}
	vmDir := filepath.Dir(vm.VNCSocket)
	saved, _ := filepath.Glob(filepath.Join(f.dir, "saved", "*.qcow2"))
	if len(saved) != 1 {
		t.Fatalf("saved ready states: %v", saved)
	}
	for path, want := range map[string]os.FileMode{
		f.dir:                              0o711,
		filepath.Join(f.dir, "vms"):        0o711,
		filepath.Join(f.dir, "saved"):      0o700,
		saved[0]:                           0o600,
		vmDir:                              0o700,
		filepath.Join(vmDir, "disk.qcow2"): 0o600,
	} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %o, want %o", path, got, want)
		}
	}
}

func TestNetworkOptions(t *testing.T) {
	f := newTestFarm(t, newFakeHV(), nil)
	ctx := context.Background()
	bad := []struct {
		opts  CreateOptions
		field string
	}{
		{CreateOptions{Network: "bridge"}, "network"},
		{CreateOptions{Network: NetworkUser, Forwards: []Forward{{GuestPort: 0, HostPort: 19222}}}, "forwards[0].guest_port"},
		{CreateOptions{Network: NetworkUser, Forwards: []Forward{{GuestPort: 22, HostPort: 80}}}, "forwards[0].host_port"},
		{CreateOptions{Network: NetworkUser, Forwards: []Forward{{GuestPort: 1, HostPort: 2000}, {GuestPort: 2, HostPort: 2000}}}, "forwards[1].host_port"},
	}
	for _, c := range bad {
		c.opts.Image, c.opts.MemoryMiB, c.opts.VCPUs = "tiny", 256, 1
		if _, err := f.m.Create(ctx, c.opts); !errors.Is(err, ErrInvalid) || fielderr.Field(err) != c.field {
			t.Errorf("%+v: %v, want field %s", c.opts, err, c.field)
		}
	}
	opts := CreateOptions{Image: "tiny", MemoryMiB: 256, VCPUs: 1, Network: NetworkUser, Forwards: []Forward{{GuestPort: 9222, HostPort: 19222}}}
	vm, err := f.m.Create(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if vm.Network != NetworkUser || !reflect.DeepEqual(vm.Forwards, opts.Forwards) {
		t.Fatalf("vm %+v", vm)
	}
	// Another VM cannot take the same host port.
	if _, err := f.m.Create(ctx, opts); !errors.Is(err, ErrInvalid) || fielderr.Field(err) != "forwards[0].host_port" {
		t.Fatalf("same host port twice: %v", err)
	}
	plain, err := f.m.Create(ctx, CreateOptions{Image: "tiny", MemoryMiB: 256, VCPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	if plain.Network != NetworkNone || plain.Start != StartBoot {
		t.Fatalf("vm without network %+v (must not start from a networked VM's saved state)", plain)
	}
	// Forwards without network, host ports picked by vmm: distinct,
	// unprivileged, and not another VM's.
	fwd := CreateOptions{Image: "tiny", MemoryMiB: 256, VCPUs: 1, Forwards: []Forward{{GuestPort: 9222}, {GuestPort: 8080}}}
	a, err := f.m.Create(ctx, fwd)
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.m.Create(ctx, fwd)
	if err != nil {
		t.Fatal(err)
	}
	ports := map[int]bool{19222: true}
	for _, v := range []VM{a, b} {
		if v.Network != NetworkNone || len(v.Forwards) != 2 {
			t.Fatalf("vm %+v", v)
		}
		for _, fw := range v.Forwards {
			if fw.HostPort < 1024 || ports[fw.HostPort] {
				t.Fatalf("picked host port %d (taken: %v)", fw.HostPort, ports)
			}
			ports[fw.HostPort] = true
		}
	}
}

// A QEMU that exits is announced within about a second even when libvirt
// stays silent: vmm watches the process itself.
func TestDiedFromProcessExit(t *testing.T) {
	hv := newFakeHV()
	hv.pidDir = t.TempDir()
	f := newTestFarm(t, hv, nil)
	vm, err := f.m.Create(context.Background(), tinyOpts)
	if err != nil {
		t.Fatal(err)
	}
	f.next(t)
	f.next(t)
	hv.mu.Lock()
	proc := hv.doms[vm.Domain].proc
	hv.mu.Unlock()
	start := time.Now()
	proc.Process.Kill() // no libvirt event follows
	ev := f.next(t)
	if ev.Kind != EventDied || ev.Reason != reasonProcessExited || ev.VM.State != StateBroken {
		t.Fatalf("event %+v", ev)
	}
	t.Logf("announced %s after the exit", time.Since(start).Round(time.Millisecond))

	// A guest shutdown libvirt reported ahead of the exit names the death
	// at once.
	off, err := f.m.Create(context.Background(), tinyOpts)
	if err != nil {
		t.Fatal(err)
	}
	f.next(t)
	f.next(t)
	hv.mu.Lock()
	hv.emitLocked(domainEvent{Name: off.Domain, Type: libvirt.DomainEventShutdown, Detail: int32(libvirt.DomainEventShutdownGuest)})
	proc = hv.doms[off.Domain].proc
	hv.mu.Unlock()
	time.Sleep(20 * time.Millisecond) // the event is read before QEMU exits, as in life
	start = time.Now()
	proc.Process.Kill()
	ev = f.next(t)
	if ev.Kind != EventDied || ev.Reason != "guest powered off" || time.Since(start) >= pidExitGrace {
		t.Fatalf("event %+v after %s", ev, time.Since(start))
	}

	// deskfarm's own destroy is not announced as a death.
	vm2, err := f.m.Create(context.Background(), tinyOpts)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.m.Destroy(context.Background(), vm2.ID); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if ev := f.next(t); ev.Kind == EventDied {
			t.Fatalf("destroy announced as a death: %+v", ev)
		}
	}
	time.Sleep(pidExitGrace + 100*time.Millisecond)
	f.noEvent(t)
}

// A guest agent libvirt reports unresponsive (its guest-sync got no answer:
// a stopped qemu-ga) is a timeout to the caller; one that disappeared
// mid-command or is not connected stays an agent error. The first two
// messages are libvirtd 9.0.0's, as the fault tests got them
// (cmd/deskfarm/faults_e2e_test.go: a qemu-ga stopped with SIGSTOP, a
// guest powering off under an exec); the third is fakeHV's, as vmm sees it
// right after a restore.
func TestUnresponsiveAgentIsATimeout(t *testing.T) {
	cases := []struct {
		name, msg   string
		wantTimeout bool
	}{
		{"stopped", "Guest agent is not responding: Guest agent not available for now", true},
		{"gone", "Guest agent is not responding: Guest agent disappeared while executing command", false},
		{"absent", "Guest agent is not responding: QEMU guest agent is not connected", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			hv := newFakeHV()
			f := newTestFarm(t, hv, nil)
			vm, err := f.m.Create(context.Background(), tinyOpts)
			if err != nil {
				t.Fatal(err)
			}
			hv.mu.Lock()
			hv.fail["agent:guest-exec"] = libvirt.Error{Code: uint32(libvirt.ErrAgentUnresponsive), Message: c.msg}
			hv.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err = f.m.Exec(ctx, vm.ID, ExecRequest{Argv: []string{"true"}})
			if errors.Is(err, ErrTimeout) != c.wantTimeout || errors.Is(err, ErrAgent) == c.wantTimeout || !strings.Contains(err.Error(), vm.ID) {
				t.Errorf("exec: %v; want a timeout %v, naming the VM", err, c.wantTimeout)
			}
			f.m.Destroy(context.Background(), vm.ID)
		})
	}
}
