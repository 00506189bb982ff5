package desk

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"image"
	"log/slog"
	"sync"
	"time"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/player"
)

// Desk is one VM's session: its display connection, frame hub, executors,
// human-control state and activity log. A Pool makes and ends desks; all
// methods are safe for concurrent use.
type Desk struct {
	// VM is the VM's id.
	VM string
	// Display is the VM's screen connection itself, for benchmarks and
	// tests: input through it bypasses control and the activity log.
	// Agents use Run, people Takeover.
	Display Display

	disp    Display // the connection itself
	log     *slog.Logger
	maxExec int
	hub     *hub

	done    chan struct{} // closed by close
	closeMu sync.Mutex
	closeBy *ClosedError

	execMu sync.Mutex
	execs  map[string]*list.Element // by size; values *execEntry
	lru    *list.List               // front: most recently used

	ctl  control
	act  activityLog
	runs runSet
	in   humanInputs // people's input, for the trajectory recorder

	// guest and activity reach inside the guest (nil without a farm that
	// can: GuestExec, CPUTimer).
	guest    *guestInput
	activity player.GuestActivity
}

type execEntry struct {
	key string
	e   *player.Executor
}

func newDesk(id string, disp Display, maxExec int, log *slog.Logger) *Desk {
	d := &Desk{VM: id, disp: disp, log: log, maxExec: maxExec, done: make(chan struct{}),
		execs: map[string]*list.Element{}, lru: list.New()}
	d.hub = newHub(id, disp, log)
	d.act.init()
	d.ctl.init(id, disp, log)
	d.in.init(id, log)
	d.runs.init()
	d.Display = disp
	return d
}

// Done is closed when the desk closes; Err then says why.
func (d *Desk) Done() <-chan struct{} { return d.done }

// Err is nil while the desk is open, then a *ClosedError.
func (d *Desk) Err() error {
	d.closeMu.Lock()
	defer d.closeMu.Unlock()
	if d.closeBy == nil {
		return nil
	}
	return d.closeBy
}

// close ends the desk: viewers and feeds end with why, the connection
// closes. Held input is not released: the VM is gone.
func (d *Desk) close(why *ClosedError) {
	d.closeMu.Lock()
	if d.closeBy != nil {
		d.closeMu.Unlock()
		return
	}
	d.closeBy = why
	close(d.done)
	d.closeMu.Unlock()
	d.runs.cancelAll(why)
	d.ctl.clear()
	// The connection first: by the time a viewer or feed hears of the
	// close, the VM's display is gone.
	if err := d.disp.Close(); err != nil {
		d.log.Debug("close display", "vm", d.VM, "op", "desk.close", "err", err)
	}
	d.hub.close()
	d.act.close()
	d.in.close()
	d.log.Info("desk closed", "vm", d.VM, "op", "desk.close", "reason", why.Reason)
}

// reset applies vmm.EventReset, seen at 'at': runs begun before it are
// cancelled (they end with a *ResetError), held input is released once they
// have returned (the guest no longer knows of it, and the executors must
// not think it held), control goes back to the agent unless it was taken
// after the reset, and the activity log starts a fresh segment. It runs on
// the VM's own lane (Pool.route): waiting for the runs to stop delays only
// this VM's later events.
func (d *Desk) reset(at time.Time) {
	if n := d.runs.cancelBefore(at, &ResetError{VM: d.VM, At: at}); n > 0 {
		d.log.Info("runs cut short by a reset", "vm", d.VM, "op", "reset", "runs", n)
	}
	if err := d.releaseAgentInput(); err != nil {
		d.log.Warn("release agent input after reset", "vm", d.VM, "op", "reset", "err", err)
	}
	if d.ctl.releaseBefore(at) {
		d.log.Info("control handed back to the agent by a reset", "vm", d.VM, "op", "reset")
	}
	d.act.segment(at)
}

// releaseAgentInput lets go of every key and button the executors hold. Each
// executor's Release waits for the run it is playing to return.
func (d *Desk) releaseAgentInput() error {
	d.execMu.Lock()
	es := make([]*player.Executor, 0, d.lru.Len())
	for el := d.lru.Front(); el != nil; el = el.Next() {
		es = append(es, el.Value.(*execEntry).e)
	}
	d.execMu.Unlock()
	var errs []error
	for _, e := range es {
		errs = append(errs, e.Release())
	}
	return errors.Join(errs...)
}

// executor returns the executor of a screenshot size. At most maxExec are
// kept: asking for another size evicts the least recently used one, whose
// held input is released first (in the background: a run in progress on it
// finishes). Evicting rather than refusing keeps a client that changes its
// size working; the cost is that holds made under the evicted size end.
func (d *Desk) executor(size player.ScreenshotSize) (*player.Executor, error) {
	key := size.String()
	d.execMu.Lock()
	defer d.execMu.Unlock()
	if el, ok := d.execs[key]; ok {
		d.lru.MoveToFront(el)
		return el.Value.(*execEntry).e, nil
	}
	var guest player.GuestInput // a nil *guestInput would be a non-nil interface
	if d.guest != nil {
		guest = d.guest
	}
	e, err := player.NewExecutor(d.disp, player.ExecutorConfig{Size: size, Logger: d.log.With("vm", d.VM),
		Guest: guest, Activity: d.activity, GuestIdle: GuestIdle})
	if err != nil {
		return nil, err
	}
	for d.lru.Len() >= d.maxExec {
		old := d.lru.Remove(d.lru.Back()).(*execEntry)
		delete(d.execs, old.key)
		d.log.Info("executor evicted", "vm", d.VM, "op", "actions", "size", old.key, "max", d.maxExec)
		go func() {
			if err := old.e.Release(); err != nil {
				d.log.Warn("release input of evicted executor", "vm", d.VM, "op", "actions", "size", old.key, "err", err)
			}
		}()
	}
	d.execs[key] = d.lru.PushFront(&execEntry{key: key, e: e})
	return e, nil
}

// Executors returns the screenshot sizes the desk keeps executors for,
// most recently used first.
func (d *Desk) Executors() []string {
	d.execMu.Lock()
	defer d.execMu.Unlock()
	var out []string
	for el := d.lru.Front(); el != nil; el = el.Next() {
		out = append(out, el.Value.(*execEntry).key)
	}
	return out
}

// RunResult is what Run played and what the agent sees.
type RunResult struct {
	player.Result
	// Screenshot is the agent's coordinate space (the screenshot size).
	Screenshot image.Point
}

// Run plays an agent's actions at a screenshot size and records what ran in
// the activity log. It refuses with a *HumanControlError while a person
// holds control.
func (d *Desk) Run(ctx context.Context, size player.ScreenshotSize, acts []actions.Action, opts player.RunOptions) (RunResult, error) {
	if err := d.Err(); err != nil {
		return RunResult{}, err
	}
	if since, ok := d.Human(); ok {
		return RunResult{}, &HumanControlError{VM: d.VM, Since: since}
	}
	e, err := d.executor(size)
	if err != nil {
		return RunResult{}, err
	}
	ctx, end := d.runs.start(ctx)
	defer end()
	d.syncPointer(ctx, acts)
	res, err := e.Run(ctx, acts, opts)
	sc := e.Scaler()
	d.act.add(agentEvents(acts, res, sc)...)
	out := RunResult{Result: res}
	out.Screenshot.X, out.Screenshot.Y = sc.ScreenshotSize()
	return out, d.runError(ctx, err)
}

// runError names the VM in a run's error and says why a run ended early: a
// reset or the desk's close that cancelled it (ctx is the run's context
// from runs.start), or the VM's death under a failed display write.
func (d *Desk) runError(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if cause := context.Cause(ctx); cause != nil && (errors.Is(cause, ErrReset) || errors.Is(cause, ErrClosed)) {
		return fmt.Errorf("%w (%v)", cause, err)
	}
	if cerr := d.closedUnder(ctx, err); cerr != nil {
		return fmt.Errorf("actions on vm %s: %w (the display failed: %v)", d.VM, cerr, err)
	}
	return fmt.Errorf("actions on vm %s: %w", d.VM, err)
}

// deathGrace is how long a failed display write waits for the VM's death
// to be announced: a QEMU killed under an action breaks the VNC socket at
// once, while vmm's pid watch names the death ~0.7 s later (vmm/pidwatch.go).
const deathGrace = 2 * time.Second

// closedUnder returns the desk's close reason when err is a display
// failure and the desk closes within deathGrace (its VM died or was
// destroyed), so the caller hears "vm died" rather than a broken pipe.
func (d *Desk) closedUnder(ctx context.Context, err error) error {
	if !errors.Is(err, actions.ErrDisplay) {
		return nil
	}
	t := time.NewTimer(deathGrace)
	defer t.Stop()
	select {
	case <-d.done:
		return d.Err()
	case <-t.C:
	case <-ctx.Done():
	}
	return nil
}

// RunCall plays an agent's call at a screenshot size: play gets a Runner
// whose every run of actions (one per block of a toolset turn) is refused
// with a *HumanControlError while a person holds control, and recorded in
// the activity log, as Run. The desk knows no agent vocabulary: play is the
// vocabulary's (vocab.Call.Run), so the desk links no AI SDK. RunCall
// returns the agent's coordinate space (the screenshot size).
func (d *Desk) RunCall(ctx context.Context, size player.ScreenshotSize, play func(context.Context, player.Runner) error) (image.Point, error) {
	if err := d.Err(); err != nil {
		return image.Point{}, err
	}
	if since, ok := d.Human(); ok {
		return image.Point{}, &HumanControlError{VM: d.VM, Since: since}
	}
	e, err := d.executor(size)
	if err != nil {
		return image.Point{}, err
	}
	ctx, end := d.runs.start(ctx)
	defer end()
	err = play(ctx, deskRunner{d: d, e: e})
	var sc image.Point
	sc.X, sc.Y = e.Scaler().ScreenshotSize()
	return sc, d.runError(ctx, err)
}

// deskRunner is the vocab.Runner RunCall hands a Call: an executor behind
// the desk's control check and activity log.
type deskRunner struct {
	d *Desk
	e *player.Executor
}

func (r deskRunner) Run(ctx context.Context, acts []actions.Action, opts player.RunOptions) (player.Result, error) {
	if err := r.d.Err(); err != nil {
		return player.Result{}, err
	}
	if since, ok := r.d.Human(); ok {
		return player.Result{}, &HumanControlError{VM: r.d.VM, Since: since}
	}
	r.d.syncPointer(ctx, acts)
	res, err := r.e.Run(ctx, acts, opts)
	r.d.act.add(agentEvents(acts, res, r.e.Scaler())...)
	return res, err
}

// syncPointer tells the display where the guest's pointer is when acts
// need the pointer's position (needsPointer) and the display has sent no
// pointer event yet, so it cannot know: after the desk opens, a click
// without coordinates or cursor_position would otherwise fail with
// actions.ErrPointerUnknown. Cua's commands act where the pointer is when
// they name no point, and its client asks get_cursor_position first.
//
// The event goes straight to the display, in native pixels (through an
// executor of a scaled size the position would round off by a pixel), with
// no buttons: none can be held before the first pointer event. It moves
// the pointer where it already is, so it is not logged as an action.
// Without the guest input path, or when the guest cannot say, acts run as
// they are and fail as before.
func (d *Desk) syncPointer(ctx context.Context, acts []actions.Action) {
	if d.guest == nil || !needsPointer(acts) {
		return
	}
	if x, _ := d.disp.CursorPos(); x >= 0 {
		return
	}
	at, err := d.guest.pointer(ctx)
	if err == nil {
		err = d.disp.Pointer(at.X, at.Y, 0)
	}
	if err != nil {
		d.log.Warn("pointer position from the guest", "vm", d.VM, "op", "actions", "err", err)
	}
}

// needsPointer reports whether acts use the pointer's position before an
// action of theirs puts it somewhere: an action without a point (a click,
// a button, a scroll, a drag's start, move_by) or cursor_position. Actions
// that do not touch the pointer (keys, text, waits, captures) are skipped.
func needsPointer(acts []actions.Action) bool {
	for _, a := range acts {
		switch a := a.(type) {
		case actions.Move:
			return false
		case actions.MoveBy, actions.CursorPosition:
			return true
		case actions.Click:
			return a.At == nil
		case actions.ButtonDown:
			return a.At == nil
		case actions.ButtonUp:
			return a.At == nil
		case actions.Scroll:
			return a.At == nil
		case actions.Drag:
			return a.From == nil
		}
	}
	return false
}

// ScreenshotOptions asks for one screenshot.
type ScreenshotOptions struct {
	// Size scales the image ("native" is the zero value).
	Size player.ScreenshotSize
	// Fresh first proves the mirror current with an update round trip (~30
	// ms): the screen may have changed by other means (a command run
	// through the guest agent) while QEMU's refresh timer idles at up to 3
	// s. Without it the screenshot is a copy of the live mirror: actions
	// settle before they answer, so it already shows their effect.
	Fresh bool
	// Encode picks the format and quality.
	Encode player.EncodeOptions
}

// Screenshot encodes the live framebuffer mirror, cursor included, and
// returns the bytes and their media type.
func (d *Desk) Screenshot(ctx context.Context, o ScreenshotOptions) ([]byte, string, error) {
	if err := d.Err(); err != nil {
		return nil, "", err
	}
	if o.Fresh {
		if _, err := d.disp.Settle(ctx, 0, time.Second); err != nil {
			return nil, "", fmt.Errorf("screenshot of vm %s: %w: %w", d.VM, actions.ErrDisplay, err)
		}
	}
	img := d.disp.Snapshot()
	sc, err := player.NewScaler(img.Bounds().Dx(), img.Bounds().Dy(), o.Size)
	if err != nil {
		return nil, "", err
	}
	return player.Encode(sc.Screenshot(img), o.Encode)
}
