package desk

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/player"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/vmm/vmmtest"
)

// rig is a Pool over an in-memory farm whose displays are fakes; a VM's
// dial blocks while hang[id] is open.
type rig struct {
	t    *testing.T
	farm *vmmtest.Farm
	pool *Pool

	mu    sync.Mutex
	disps map[string]*fakeDisplay
	hang  map[string]chan struct{}
	dials map[string]int
}

func newRig(t *testing.T, vms int) *rig {
	t.Helper()
	r := &rig{t: t, farm: vmmtest.New(), disps: map[string]*fakeDisplay{}, hang: map[string]chan struct{}{}, dials: map[string]int{}}
	for range vms {
		if _, err := r.farm.Create(context.Background(), vmm.CreateOptions{Image: "tiny"}); err != nil {
			t.Fatal(err)
		}
	}
	r.pool = New(r.farm, Options{Log: slog.New(slog.DiscardHandler), Dial: r.dial, DialTimeout: 5 * time.Second})
	t.Cleanup(func() { r.pool.Close(); r.farm.Close() })
	return r
}

func (r *rig) dial(ctx context.Context, vm vmm.VM, _ *slog.Logger) (Display, error) {
	r.mu.Lock()
	r.dials[vm.ID]++
	hang := r.hang[vm.ID]
	r.mu.Unlock()
	if hang != nil {
		select {
		case <-hang:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	d := newFakeDisplay(640, 400)
	r.mu.Lock()
	r.disps[vm.ID] = d
	r.mu.Unlock()
	return d, nil
}

func (r *rig) display(id string) *fakeDisplay {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.disps[id]
}

func (r *rig) get(id string) *Desk {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d, err := r.pool.Get(ctx, id)
	if err != nil {
		r.t.Fatalf("get desk of %s: %v", id, err)
	}
	return d
}

// eventually fails the test unless cond holds within 5 s; lifecycle events
// reach the pool asynchronously.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 5s: %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestHungDialDoesNotBlockOtherVMs(t *testing.T) {
	r := newRig(t, 2)
	hang := make(chan struct{})
	r.hang["vm1"] = hang

	got1 := make(chan error, 1)
	go func() {
		_, err := r.pool.Get(context.Background(), "vm1")
		got1 <- err
	}()
	eventually(t, "vm1's dial started", func() bool { r.mu.Lock(); defer r.mu.Unlock(); return r.dials["vm1"] == 1 })

	// Another VM is served while vm1's dial hangs.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := r.pool.Get(ctx, "vm2"); err != nil {
		t.Fatalf("vm2 while vm1's dial hangs: %v", err)
	}

	// A second caller for vm1 waits for the same dial, only as long as its
	// own context allows, and opens no second connection.
	short, cancelShort := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelShort()
	if _, err := r.pool.Get(short, "vm1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second caller for vm1: err %v, want its own deadline", err)
	}

	close(hang)
	if err := <-got1; err != nil {
		t.Fatalf("vm1 after its dial finished: %v", err)
	}
	if d1, d2 := r.get("vm1"), r.get("vm1"); d1 != d2 {
		t.Error("two desks for one VM")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dials["vm1"] != 1 {
		t.Errorf("vm1 dialled %d times, want 1", r.dials["vm1"])
	}
}

func TestDiedClosesDeskAndViewers(t *testing.T) {
	r := newRig(t, 1)
	d := r.get("vm1")
	v, err := d.Watch(0)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()

	r.farm.Kill("vm1", "crashed")
	select {
	case <-v.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("viewer still open 5s after the VM died")
	}
	err = d.Err()
	if !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "crashed") {
		t.Errorf("desk error %v, want ErrClosed saying the VM crashed", err)
	}
	if !r.display("vm1").isClosed() {
		t.Error("the VNC connection of a dead VM is still open")
	}
	if _, err := r.pool.Get(context.Background(), "vm1"); !errors.Is(err, vmm.ErrNotRunning) {
		t.Errorf("get after death: %v, want ErrNotRunning", err)
	}
	if _, err := d.Run(context.Background(), player.ScreenshotSize{}, nil, player.RunOptions{}); !errors.Is(err, ErrClosed) {
		t.Errorf("run on a closed desk: %v, want ErrClosed", err)
	}
	if _, err := d.Watch(0); !errors.Is(err, ErrClosed) {
		t.Errorf("watch on a closed desk: %v, want ErrClosed", err)
	}
}

// QEMU killed under an action breaks the VNC socket before the death is
// announced; the action answers with the death, not the broken pipe.
func TestRunFailingAsTheVMDiesSaysItDied(t *testing.T) {
	r := newRig(t, 2)
	broken := errors.New("write unix vnc.sock: broken pipe")

	d := r.get("vm1")
	r.display("vm1").mu.Lock()
	r.display("vm1").broken = broken
	r.display("vm1").mu.Unlock()
	go func() {
		time.Sleep(100 * time.Millisecond)
		r.farm.Kill("vm1", "crashed")
	}()
	_, err := d.Run(context.Background(), player.ScreenshotSize{}, keyDown(t), quick)
	if !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "crashed") || !strings.Contains(err.Error(), "vm1") {
		t.Errorf("run while the VM dies: %v; want ErrClosed naming vm1 and the crash", err)
	}

	// A display failure with no death to follow stays a display error.
	d2 := r.get("vm2")
	r.display("vm2").mu.Lock()
	r.display("vm2").broken = broken
	r.display("vm2").mu.Unlock()
	_, err = d2.Run(context.Background(), player.ScreenshotSize{}, keyDown(t), quick)
	if !errors.Is(err, actions.ErrDisplay) || errors.Is(err, ErrClosed) {
		t.Errorf("run on a broken display of a live VM: %v; want ErrDisplay", err)
	}
}

func TestDestroyedClosesDesk(t *testing.T) {
	r := newRig(t, 1)
	d := r.get("vm1")
	if err := r.farm.Destroy(context.Background(), "vm1"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "desk closed after destroy", func() bool { return d.Err() != nil })
	if !r.display("vm1").isClosed() || r.pool.Peek("vm1") != nil {
		t.Error("destroyed VM's desk still open or still in the pool")
	}
}

func TestDestroyedWhileDialling(t *testing.T) {
	r := newRig(t, 1)
	hang := make(chan struct{})
	r.hang["vm1"] = hang
	got := make(chan error, 1)
	go func() {
		_, err := r.pool.Get(context.Background(), "vm1")
		got <- err
	}()
	eventually(t, "dial started", func() bool { r.mu.Lock(); defer r.mu.Unlock(); return r.dials["vm1"] == 1 })
	if err := r.farm.Destroy(context.Background(), "vm1"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if !errors.Is(err, ErrClosed) && !errors.Is(err, context.Canceled) {
			t.Errorf("get of a VM destroyed mid-dial: %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("get still waiting 5s after the VM was destroyed mid-dial")
	}
	close(hang)
}

// keyDown is an agent action that holds Shift across requests.
func keyDown(t *testing.T) []actions.Action {
	t.Helper()
	acts, err := actions.DecodeActions([]byte(`[{"kind":"key_down","keys":["shift"]}]`))
	if err != nil {
		t.Fatal(err)
	}
	return acts
}

var quick = player.RunOptions{NoSettle: true, Screenshot: player.ScreenshotNever}

func TestResetReleasesInputAndControl(t *testing.T) {
	r := newRig(t, 1)
	d := r.get("vm1")
	disp := r.display("vm1")
	if _, err := d.Run(context.Background(), player.ScreenshotSize{}, keyDown(t), quick); err != nil {
		t.Fatal(err)
	}
	g, err := d.TakeControl()
	if err != nil {
		t.Fatal(err)
	}
	tk, err := d.Takeover(g.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer tk.Close()
	if err := tk.Key('a', true); err != nil {
		t.Fatal(err)
	}
	if err := tk.Pointer(10, 20, 1); err != nil {
		t.Fatal(err)
	}
	if keys, buttons := disp.guest(); keys != 2 || buttons != 1 {
		t.Fatalf("before the reset the guest holds %d keys and buttons %b, want 2 and 1", keys, buttons)
	}

	if _, err := r.farm.Reset(context.Background(), "vm1"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "control handed back by the reset", func() bool { _, human := d.Human(); return !human })
	eventually(t, "keys and buttons released by the reset", func() bool { k, b := disp.guest(); return k == 0 && b == 0 })
	if d.ValidControl(g.Token) {
		t.Error("the control token outlived the reset")
	}
	if err := tk.Key('b', true); !errors.Is(err, ErrNotInControl) {
		t.Errorf("takeover input after the reset: %v, want ErrNotInControl", err)
	}
	ev, ok := d.LastEvent()
	if !ok || ev.Kind != "reset" || ev.Source != SourceFarm {
		t.Errorf("last activity %+v, want the reset that starts a fresh segment", ev)
	}
	if evs, _ := d.Activity(0); len(evs) != 1 {
		t.Errorf("activity after the reset holds %d events, want only the reset", len(evs))
	}
	// The agent acts again.
	if _, err := d.Run(context.Background(), player.ScreenshotSize{}, keyDown(t), quick); err != nil {
		t.Errorf("agent after the reset: %v", err)
	}
}

func TestControlRefusesAgentAndReleasesOnHandOver(t *testing.T) {
	r := newRig(t, 1)
	d := r.get("vm1")
	disp := r.display("vm1")
	g1, _ := d.TakeControl()
	if _, err := d.Run(context.Background(), player.ScreenshotSize{}, keyDown(t), quick); !errors.Is(err, ErrHumanControl) {
		t.Fatalf("agent under human control: %v, want ErrHumanControl", err)
	}
	if _, err := d.Takeover("not-the-token"); !errors.Is(err, ErrNotInControl) {
		t.Errorf("takeover with a wrong token: %v, want ErrNotInControl", err)
	}
	ro, _ := d.Takeover("")
	if err := ro.Key('x', true); !errors.Is(err, ErrNotInControl) {
		t.Errorf("read-only key: %v, want ErrNotInControl", err)
	}
	ro.Close()

	// Replaced by another person: what the first one held is released.
	t1, _ := d.Takeover(g1.Token)
	t1.Key(0xffe1, true) // Shift_L
	t1.Pointer(5, 5, 4)
	g2, _ := d.TakeControl()
	if k, b := disp.guest(); k != 0 || b != 0 {
		t.Errorf("after another person took over the guest holds %d keys, buttons %b; want none", k, b)
	}
	if err := t1.Key('q', true); !errors.Is(err, ErrNotInControl) {
		t.Errorf("replaced person's input: %v, want ErrNotInControl", err)
	}
	// Disconnecting releases.
	t2, _ := d.Takeover(g2.Token)
	t2.Key('a', true)
	t2.Close()
	if k, _ := disp.guest(); k != 0 {
		t.Errorf("after the person disconnected the guest holds %d keys", k)
	}
	// Handing back releases what a connection in control holds.
	g3, _ := d.TakeControl()
	t3, _ := d.Takeover(g3.Token)
	t3.Key('z', true)
	t3.Pointer(1, 1, 1)
	if !d.ReleaseControl() {
		t.Error("ReleaseControl: no one was in control")
	}
	if k, b := disp.guest(); k != 0 || b != 0 {
		t.Errorf("after hand-back the guest holds %d keys, buttons %b; want none", k, b)
	}
	if _, err := d.Run(context.Background(), player.ScreenshotSize{}, keyDown(t), quick); err != nil {
		t.Errorf("agent after hand-back: %v", err)
	}
}

func TestExecutorsBounded(t *testing.T) {
	r := newRig(t, 1)
	d := r.get("vm1")
	disp := r.display("vm1")
	sizes := []string{"native", "320x200", "160x100", "auto", "64x40", "32x20"}
	first, _ := player.ParseScreenshotSize(sizes[0])
	if _, err := d.Run(context.Background(), first, keyDown(t), quick); err != nil {
		t.Fatal(err)
	}
	for _, s := range sizes[1:] {
		sz, err := player.ParseScreenshotSize(s)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.Run(context.Background(), sz, nil, quick); err != nil {
			t.Fatal(err)
		}
	}
	if got := d.Executors(); len(got) != DefaultMaxExecutors || got[0] != "32x20" {
		t.Errorf("executors %v, want the %d most recently used, newest first", got, DefaultMaxExecutors)
	}
	// The evicted first size held Shift; eviction released it.
	eventually(t, "the evicted executor's held key released", func() bool { k, _ := disp.guest(); return k == 0 })
}

func TestCloseStopsAHungDial(t *testing.T) {
	r := newRig(t, 1)
	r.hang["vm1"] = make(chan struct{}) // never opens
	got := make(chan error, 1)
	go func() {
		_, err := r.pool.Get(context.Background(), "vm1")
		got <- err
	}()
	eventually(t, "dial started", func() bool { r.mu.Lock(); defer r.mu.Unlock(); return r.dials["vm1"] == 1 })
	r.pool.Close()
	select {
	case err := <-got:
		if !errors.Is(err, ErrClosed) {
			t.Errorf("get while the pool closed: %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("get still waiting 5s after the pool closed")
	}
}

func TestWaitReset(t *testing.T) {
	r := newRig(t, 1)
	r.get("vm1")
	start := time.Now()
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := r.pool.WaitReset(short, "vm1", start); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait with no reset: %v, want the deadline", err)
	}
	if _, err := r.farm.Reset(context.Background(), "vm1"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	if err := r.pool.WaitReset(ctx, "vm1", start); err != nil {
		t.Fatalf("wait after a reset: %v", err)
	}
	if ev, _ := r.pool.Peek("vm1").LastEvent(); ev.Kind != "reset" {
		t.Errorf("WaitReset returned before the desk applied the reset (last event %+v)", ev)
	}
}

func TestWaitResetReturnsForAGoneVM(t *testing.T) {
	r := newRig(t, 1)
	start := time.Now()
	if err := r.farm.Destroy(context.Background(), "vm1"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.pool.WaitReset(ctx, "vm1", start); err != nil {
		t.Errorf("wait for a reset of a destroyed VM: %v, want nil (no reset is coming)", err)
	}
}
