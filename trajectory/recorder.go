package trajectory

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/player"
)

const (
	// queuePictures is how many steps with pictures may wait for the
	// writer; past it a step is kept without them (Dropped). Each holds up
	// to two native snapshots (4 MB each at 1280x800), so this bounds a
	// recorder that cannot keep up to about half a GB.
	queuePictures = 64
	// infoEvery is how often, in steps, info.json is rewritten while
	// recording (a restart counts the steps from trajectory.jsonl anyway).
	infoEvery = 10
	// stopTimeout bounds finishing the video at the end.
	stopTimeout = 2 * time.Minute
)

// Recorder records one VM's steps. Its methods are safe on a nil
// *Recorder (they record nothing), so a caller need not check whether its
// VM is recorded.
type Recorder struct {
	m      *Manager
	id     string
	meta   Meta
	dir    string
	screen Screen
	log    *slog.Logger
	native image.Point
	// size is the episode's screenshot size, for a step that names none.
	size image.Point

	// last is the latest snapshot, reused while the screen has not
	// changed (dirty false): a step's before is then the previous step's
	// after without another copy of the framebuffer.
	snapMu sync.Mutex
	last   *image.RGBA
	dirty  atomic.Bool

	mu       sync.Mutex
	info     api.TrajectoryInfo
	queue    []job
	pictures int  // jobs in queue holding pictures
	closed   bool // no more steps: stopping, stopped or failed
	reason   string
	failed   error // a write error outside the writer
	kept     int   // steps written; the writer's
	wake     chan struct{}
	quit     chan struct{}
	quitOnce sync.Once

	done    chan struct{} // the writer has finished
	written atomic.Int64  // bytes written, the video aside

	// Writer-only state.
	steps *os.File
	pics  *pictures
	media media
}

func newRecorder(m *Manager, meta Meta, screen Screen, dir string) *Recorder {
	r := &Recorder{
		m: m, id: meta.ID, meta: meta, dir: dir, screen: screen,
		log:  m.log.With("op", "trajectory", "vm", meta.VM, "episode", meta.Episode),
		wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{}),
	}
	r.dirty.Store(true)
	img := r.snap()
	r.native = img.Rect.Size()
	r.size = r.native
	if ss, err := player.ParseScreenshotSize(meta.ScreenshotSize); err == nil {
		if sc, err := player.NewScaler(r.native.X, r.native.Y, ss); err == nil {
			r.size.X, r.size.Y = sc.ScreenshotSize()
		}
	}
	r.pics = newPictures(dir, r.native)
	r.info = api.TrajectoryInfo{
		ID: meta.ID, Episode: meta.Episode, VM: meta.VM, Pool: meta.Pool, Image: meta.Image,
		State: api.TrajectoryRecording, Options: meta.Options,
		ScreenshotSize: meta.ScreenshotSize, NativeSize: sizeText(r.native),
		StartedAt: m.now(), URL: "/trajectories/" + meta.ID,
	}
	return r
}

func sizeText(p image.Point) string { return fmt.Sprintf("%dx%d", p.X, p.Y) }

// ID is the trajectory's id.
func (r *Recorder) ID() string {
	if r == nil {
		return ""
	}
	return r.id
}

// Info is the recording's info now (zero for a nil Recorder).
func (r *Recorder) Info() api.TrajectoryInfo {
	if r == nil {
		return api.TrajectoryInfo{}
	}
	r.mu.Lock()
	info := r.info
	r.mu.Unlock()
	if info.State == api.TrajectoryRecording {
		info.Bytes = r.bytes()
	}
	return info
}

// snap is the screen now, reusing the last snapshot while no damage came.
func (r *Recorder) snap() *image.RGBA {
	r.snapMu.Lock()
	defer r.snapMu.Unlock()
	if r.last != nil && !r.dirty.Load() {
		return r.last
	}
	r.dirty.Store(false)
	r.last = r.screen.Snapshot()
	return r.last
}

// Begin marks the start of an agent's step: the picture now is its
// before. Call End with what happened; a Pending that is never ended is
// dropped.
func (r *Recorder) Begin() *Pending {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return nil
	}
	return &Pending{r: r, at: r.m.now(), before: r.snap()}
}

// Pending is a step begun and not yet ended.
type Pending struct {
	r      *Recorder
	at     time.Time
	before *image.RGBA
}

// Call is what an agent's step did, as the web layer saw it.
type Call struct {
	Kind string // api.Kind*
	Tool string
	// Request and Response are the bodies exactly as sent and returned;
	// the recorder replaces AfterImage's base64 in Response by its hash.
	Request  json.RawMessage
	Response json.RawMessage
	// Actions are the neutral actions played, in the coordinates of
	// ScreenshotSize.
	Actions        []actions.Action
	Status         int
	IsError        bool
	Error          *api.ErrorBody
	ModelResponse  string
	Settle         time.Duration
	Duration       time.Duration
	ScreenshotSize image.Point
	// AfterImage is the image the agent got (PNG or JPEG bytes), nil if
	// none: then the recorder takes the after picture itself.
	AfterImage []byte
	Exec       *api.StepExec
	File       *api.StepFile
	Snapshot   *api.StepSnapshot
	// FileData is a file step's contents, kept only with KeepFiles.
	FileData []byte
}

// job is a step waiting for the writer.
type job struct {
	step        api.TrajectoryStep
	actions     []actions.Action
	size        image.Point // the agent's screenshot size
	before      *image.RGBA // native; nil when dropped
	afterNative *image.RGBA
	afterImage  []byte // the agent's bytes
	fileData    []byte
	// hasPictures is false for a step kept without its pictures.
	hasPictures bool
}

// End records the step. It never blocks on the disk: when the recorder's
// queue is full the step is kept without its pictures (Dropped says so).
// The slices in c belong to the recorder afterwards.
func (p *Pending) End(c Call) {
	if p == nil || p.r == nil {
		return
	}
	r := p.r
	p.r = nil
	x, y := r.screen.CursorPos()
	size := c.ScreenshotSize
	if size.X <= 0 || size.Y <= 0 {
		size = r.size
	}
	j := job{
		step: api.TrajectoryStep{
			Time: p.at, Actor: api.ActorAgent, Kind: c.Kind, Tool: c.Tool,
			Request: c.Request, Response: c.Response, Status: c.Status, IsError: c.IsError, Error: c.Error,
			ModelResponse: c.ModelResponse, SettleMS: ms(c.Settle), DurationMS: ms(c.Duration),
			Cursor: &api.Point{X: x, Y: y}, ScreenshotSize: sizeText(size), NativeSize: sizeText(r.native),
			Exec: c.Exec, File: c.File, Snapshot: c.Snapshot,
		},
		actions: c.Actions, size: size, before: p.before, afterNative: r.snap(), afterImage: c.AfterImage,
	}
	if c.File != nil && r.meta.Options.KeepFiles {
		j.fileData = c.FileData
	}
	r.enqueue(j)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// enqueue hands a step to the writer, numbering it; without blocking.
func (r *Recorder) enqueue(j job) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.info.Steps++
	j.step.Step = r.info.Steps
	if r.pictures >= queuePictures {
		j.before, j.afterNative = nil, nil
		j.step.Dropped = fmt.Sprintf("pictures: the recorder's queue of %d steps was full", queuePictures)
	} else {
		r.pictures++
		j.hasPictures = true
	}
	r.queue = append(r.queue, j)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// stop asks the writer to finish (once: the first reason stands). Steps
// ended until the writer's last drain are still kept.
func (r *Recorder) stop(reason string) {
	r.quitOnce.Do(func() {
		r.mu.Lock()
		r.reason = reason
		r.mu.Unlock()
		close(r.quit)
	})
}

// fail stops the recording for a write error outside the writer (the
// video's disk filled).
func (r *Recorder) fail(err error) {
	r.mu.Lock()
	if r.failed == nil {
		r.failed = err
	}
	r.mu.Unlock()
	r.stop("")
}

// run is the writer: it writes the queued steps in order and, once asked
// to stop, the person's last actions and the rest of the queue, then
// finishes the trajectory.
func (r *Recorder) run() {
	defer close(r.done)
	for {
		select {
		case <-r.wake:
		case <-r.quit:
		}
		if err := r.drain(); err != nil {
			r.finish(err)
			return
		}
		select {
		case <-r.quit:
			r.stopDemo()
			r.mu.Lock()
			r.closed = true
			failed := r.failed
			r.mu.Unlock()
			if failed == nil {
				failed = r.drain()
			}
			r.finish(failed)
			return
		default:
		}
	}
}

// drain writes what is queued; it returns the first write error (the
// recording stops there).
func (r *Recorder) drain() error {
	for {
		r.mu.Lock()
		if len(r.queue) == 0 {
			r.mu.Unlock()
			return nil
		}
		j := r.queue[0]
		r.queue[0] = job{}
		r.queue = r.queue[1:]
		r.mu.Unlock()
		err := r.write(&j)
		if j.hasPictures {
			r.mu.Lock()
			r.pictures--
			r.mu.Unlock()
		}
		if err != nil {
			return err
		}
		if over := r.m.prune(); over > 0 {
			return &budgetError{over: over, budget: r.m.cfg.BudgetBytes}
		}
	}
}

// budgetError stops a recording that alone would exceed the budget.
type budgetError struct{ over, budget int64 }

func (e *budgetError) Error() string {
	return fmt.Sprintf("budget spent: the recordings exceed the budget of %d bytes by %d", e.budget, e.over)
}

// write writes one step: its pictures, its files, then its line.
func (r *Recorder) write(j *job) error {
	s := &j.step
	if err := r.pics.step(j); err != nil {
		return err
	}
	if j.fileData != nil && s.File != nil {
		name, n, err := r.pics.keep("files", j.fileData, "")
		if err != nil {
			return err
		}
		s.File.Kept = name
		r.written.Add(n)
	}
	r.written.Add(r.pics.flushWritten())
	if len(j.actions) > 0 {
		b, err := json.Marshal(j.actions)
		if err == nil {
			s.Actions = b
		}
	}
	s.Request = rawJSON(s.Request)
	s.Response = rawJSON(s.Response)
	if err := r.a11y(s); err != nil {
		return err
	}
	line, err := stepLine(s)
	if err != nil {
		return fmt.Errorf("encode step %d: %w", s.Step, err)
	}
	n, err := r.steps.Write(line)
	r.written.Add(int64(n))
	if err != nil {
		return fmt.Errorf("write %s: %w", stepsFile, err)
	}
	r.mu.Lock()
	r.kept++
	r.mu.Unlock()
	if s.Step%infoEvery == 0 {
		if err := writeInfo(r.dir, r.Info()); err != nil {
			return err
		}
	}
	return nil
}

// stepLine is a step's line of trajectory.jsonl. The request and answer
// keep their bytes (compacted, as a line must be): no HTML escaping turns
// a typed "<" into \u003c.
func stepLine(s *api.TrajectoryStep) ([]byte, error) { return jsonLine(s) }

// jsonLine is v's JSON and a newline, without HTML escaping.
func jsonLine(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// rawJSON keeps a body that is JSON as it is and quotes one that is not
// (an error page), so the step's line stays JSON.
func rawJSON(b json.RawMessage) json.RawMessage {
	if len(b) == 0 || json.Valid(b) {
		return b
	}
	q, _ := jsonLine(string(b))
	return bytes.TrimSuffix(q, []byte("\n"))
}

// finish ends the trajectory: media stopped, info written, the store told.
func (r *Recorder) finish(failed error) {
	r.mu.Lock()
	r.closed = true
	lost := len(r.queue)
	r.queue = nil
	r.mu.Unlock()
	r.stop("") // the demonstration feed and the damage watch end on quit
	r.stopDemo()
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	vinfo := r.stopVideo(ctx)
	cancel()
	if r.steps != nil {
		r.steps.Close()
	}
	now := r.m.now()
	r.mu.Lock()
	reason := r.reason
	if failed != nil {
		stopped := "write failed: " + failed.Error()
		var be *budgetError
		switch {
		case errors.Is(failed, syscall.ENOSPC):
			stopped = "disk full: " + failed.Error()
		case errors.As(failed, &be):
			stopped = failed.Error()
		}
		r.log.Warn("trajectory recording stopped", "id", r.id, "reason", stopped, "steps_lost", r.info.Steps-r.kept, "queued", lost)
		r.info.Stopped = stopped
		reason = stopped
	}
	r.info.Steps = r.kept
	r.info.State = api.TrajectoryFinished
	r.info.EndedAt = &now
	r.info.EndReason = reason
	if vinfo != nil {
		r.info.VideoSeconds = vinfo.Duration.Seconds()
	}
	info := r.info
	r.mu.Unlock()
	info.Bytes, _ = dirSize(r.dir)
	if err := writeInfo(r.dir, info); err != nil {
		r.log.Warn("trajectory: cannot write its info", "id", r.id, "err", err)
	}
	r.mu.Lock()
	r.info = info
	r.mu.Unlock()
	r.log.Info("trajectory finished", "id", r.id, "reason", reason, "steps", info.Steps, "bytes", info.Bytes)
	r.m.finished(r, info)
}
