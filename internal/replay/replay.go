// Package replay plays a recorded trajectory again on a fresh episode and
// says whether the desktop did the same: each step's neutral actions (an
// agent's in the step's screenshot size, a person's at native size) go to
// the new episode's actions route in order, and the screenshot answered is
// compared with the step's recorded After by a named distance (Mismatch).
// The first step past the threshold is where the replay diverged.
//
// It reads a trajectory directory as `deskfarm episode export` writes it
// (or a trajectory's deskfarm/ directory itself) and reaches the farm only
// through package client, so `deskfarm replay` links none of the server.
package replay

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/client"
)

// Trajectory is a recorded trajectory read from disk.
type Trajectory struct {
	// Dir is the trajectory's deskfarm/ directory: the files its steps
	// name are relative to it.
	Dir   string
	Info  api.TrajectoryInfo
	Steps []api.TrajectoryStep
}

// Load reads the trajectory in dir: an export's root (with deskfarm/ in
// it) or the deskfarm/ directory itself.
func Load(dir string) (*Trajectory, error) {
	d := filepath.Join(dir, "deskfarm")
	if _, err := os.Stat(filepath.Join(d, "trajectory.jsonl")); err != nil {
		d = dir
	}
	tr := &Trajectory{Dir: d}
	if b, err := os.ReadFile(filepath.Join(d, "info.json")); err == nil {
		if err := json.Unmarshal(b, &tr.Info); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(d, "info.json"), err)
		}
	}
	f, err := os.Open(filepath.Join(d, "trajectory.jsonl"))
	if err != nil {
		return nil, fmt.Errorf("no trajectory in %s (want deskfarm/trajectory.jsonl, as `deskfarm episode export` writes): %w", dir, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20) // a step's request may carry a long toolset turn
	for n := 1; sc.Scan(); n++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var s api.TrajectoryStep
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", f.Name(), n, err)
		}
		tr.Steps = append(tr.Steps, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name(), err)
	}
	return tr, nil
}

// Options configure a replay.
type Options struct {
	// Pool is the pool of the replay's episode; "" means the recorded
	// trajectory's pool, else the server's choice.
	Pool string
	// Threshold is the distance past which a step diverged; 0 means
	// DefaultThreshold.
	Threshold float64
	// KeepTiming waits before each step as long as the recording did
	// after the previous one (a person's pauses, a model's thinking), for
	// desktops whose reaction outlasts a settle.
	KeepTiming bool
	// SaveDir, when set, receives each replayed screenshot as
	// step_N.png, to look at beside the recorded one.
	SaveDir string
	// KeepEpisode leaves the replay's episode running at the end.
	KeepEpisode bool
	// Log receives one line per step; nil discards them.
	Log io.Writer
}

// Step outcomes (StepResult.Outcome).
const (
	OutcomeMatched  = "matched"  // played, and the screenshot is within the threshold
	OutcomePlayed   = "played"   // played; nothing recorded to compare with
	OutcomeDiverged = "diverged" // past the threshold, or the answer differs (an error, an exit code)
	OutcomeSkipped  = "skipped"  // nothing to play (Reason says why)
)

// StepResult is what became of one recorded step.
type StepResult struct {
	Step    int    `json:"step"`
	Actor   string `json:"actor"`
	Kind    string `json:"kind"`
	Outcome string `json:"outcome"`
	// Distance is the Mismatch distance of the screenshots, when both
	// steps have one.
	Distance *float64 `json:"distance,omitempty"`
	Reason   string   `json:"reason,omitempty"`
}

// Report is a replay's outcome.
type Report struct {
	// Episode is the replay's episode; Source the recorded trajectory's id.
	Episode   string       `json:"episode"`
	Source    string       `json:"source,omitempty"`
	Distance  string       `json:"distance"`
	Threshold float64      `json:"threshold"`
	Steps     []StepResult `json:"steps"`
	// FirstDiverged is the first diverged step's number, 0 when every
	// step reproduced.
	FirstDiverged int `json:"first_diverged"`
}

// Reproduced reports whether no step diverged.
func (r Report) Reproduced() bool { return r.FirstDiverged == 0 }

// ErrDiverged is returned (wrapped in a *DivergedError) when a step
// diverged.
var ErrDiverged = errors.New("replay diverged")

// DivergedError names the first step that diverged.
type DivergedError struct {
	Step   int
	Reason string
}

func (e *DivergedError) Error() string {
	return fmt.Sprintf("replay diverged at step %d: %s", e.Step, e.Reason)
}

func (e *DivergedError) Unwrap() error { return ErrDiverged }

// Run replays tr on a fresh episode of c and reports each step. The error
// is a *DivergedError when a step diverged (the report is complete then:
// the replay plays every step), or what stopped the replay.
func Run(ctx context.Context, c *client.Client, tr *Trajectory, opts Options) (rep Report, err error) {
	if opts.Threshold <= 0 {
		opts.Threshold = DefaultThreshold
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if opts.Pool == "" {
		opts.Pool = tr.Info.Pool
	}
	rep = Report{Source: tr.Info.ID, Distance: Mismatch, Threshold: opts.Threshold, Steps: []StepResult{}}
	if opts.SaveDir != "" {
		if err := os.MkdirAll(opts.SaveDir, 0o755); err != nil {
			return rep, err
		}
	}
	ep, err := c.StartEpisode(ctx, api.StartEpisodeRequest{Pool: opts.Pool})
	if err != nil {
		return rep, fmt.Errorf("start the replay's episode: %w", err)
	}
	rep.Episode = ep.ID
	fmt.Fprintf(opts.Log, "replaying %d steps of %s on episode %s (vm %s, pool %s); live view %s\n",
		len(tr.Steps), orDash(tr.Info.ID), ep.ID, ep.VM, ep.Pool, ep.ViewerURL)
	if !opts.KeepEpisode {
		defer func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			if _, endErr := c.EndEpisode(ctx, ep.ID); endErr != nil {
				err = errors.Join(err, fmt.Errorf("end the replay's episode %s: %w", ep.ID, endErr))
			}
		}()
	}
	p := player{c: c, tr: tr, opts: opts, target: client.Episode(ep.ID)}
	var prev time.Time
	played := time.Now()
	for _, s := range tr.Steps {
		if opts.KeepTiming && !prev.IsZero() {
			gap := s.Time.Sub(prev) - time.Since(played)
			select {
			case <-ctx.Done():
				return rep, ctx.Err()
			case <-time.After(max(gap, 0)):
			}
		}
		prev, played = s.Time, time.Now()
		res, serr := p.step(ctx, s)
		if serr != nil {
			return rep, fmt.Errorf("step %d: %w", s.Step, serr)
		}
		rep.Steps = append(rep.Steps, res)
		fmt.Fprintf(opts.Log, "step %d\t%s %s\t%s%s\n", s.Step, s.Actor, s.Kind, res.Outcome, describe(res))
		if res.Outcome == OutcomeDiverged && rep.FirstDiverged == 0 {
			rep.FirstDiverged = s.Step
			err = &DivergedError{Step: s.Step, Reason: res.Reason}
		}
	}
	return rep, err
}

func describe(r StepResult) string {
	s := ""
	if r.Distance != nil {
		s += fmt.Sprintf("\t%s %.4f", Mismatch, *r.Distance)
	}
	if r.Reason != "" {
		s += "\t" + r.Reason
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// player plays steps on the replay's episode.
type player struct {
	c      *client.Client
	tr     *Trajectory
	opts   Options
	target client.Target
}

// step plays one recorded step and judges it. An error is a failure of the
// replay itself (the farm, the disk), not a divergence.
func (p *player) step(ctx context.Context, s api.TrajectoryStep) (StepResult, error) {
	res := StepResult{Step: s.Step, Actor: s.Actor, Kind: s.Kind}
	switch {
	case hasActions(s.Actions):
		return p.actions(ctx, s, res)
	case s.Kind == api.KindExec:
		return p.exec(ctx, s, res)
	case s.Kind == api.KindFileWrite && s.File != nil && s.File.Kept != "":
		return p.fileWrite(ctx, s, res)
	case s.Kind == api.KindFileWrite:
		res.Outcome, res.Reason = OutcomeSkipped, "the file's contents were not kept (record_options.keep_files)"
	case s.Kind == api.KindSnapshot && s.Snapshot != nil:
		return p.snapshot(ctx, s, res)
	case s.Kind == api.KindFileRead:
		res.Outcome, res.Reason = OutcomeSkipped, "a file read changes nothing"
	default:
		res.Outcome, res.Reason = OutcomeSkipped, "no actions recorded"
	}
	return res, nil
}

// recordedRunOptions are the run options the step was recorded with (its
// settle, screenshot policy and format), so that the replay waits and
// looks as the recording did. A person's step has none: the defaults.
func recordedRunOptions(s api.TrajectoryStep) api.RunOptions {
	var req api.ActionsRequest
	if len(s.Request) == 0 || json.Unmarshal(s.Request, &req) != nil {
		return api.RunOptions{}
	}
	return req.RunOptions
}

// hasActions reports whether a step's Actions hold any action.
func hasActions(raw json.RawMessage) bool {
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) == nil {
		return len(list) > 0
	}
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && !bytes.Equal(t, []byte("null"))
}

func (p *player) actions(ctx context.Context, s api.TrajectoryStep, res StepResult) (StepResult, error) {
	size := s.ScreenshotSize
	if size == "" {
		size = p.tr.Info.ScreenshotSize
	}
	req := api.ActionsRequest{ScreenshotSize: size, RunOptions: recordedRunOptions(s)}
	if bytes.HasPrefix(bytes.TrimSpace(s.Actions), []byte("[")) {
		req.Actions = s.Actions
	} else {
		req.Action = s.Actions
	}
	if s.Screenshots.After == "" {
		// Nothing to compare with: spare the screenshot.
		req.Screenshot = api.ScreenshotNever
	}
	out, err := p.c.Act(ctx, p.target, req)
	if err != nil {
		return failed(s, res, err)
	}
	if s.Screenshots.After == "" {
		res.Outcome = OutcomePlayed
		if s.Dropped != "" {
			res.Reason = "no recorded screenshot: " + s.Dropped
		}
		return res, nil
	}
	if out.Image == nil {
		res.Outcome, res.Reason = OutcomeDiverged, "the replay's answer holds no screenshot"
		return res, nil
	}
	got, err := base64.StdEncoding.DecodeString(out.Image.Data)
	if err != nil {
		return res, fmt.Errorf("the answer's screenshot: %w", err)
	}
	if p.opts.SaveDir != "" {
		if err := os.WriteFile(filepath.Join(p.opts.SaveDir, fmt.Sprintf("step_%d.png", s.Step)), got, 0o644); err != nil {
			return res, err
		}
	}
	want, err := os.ReadFile(filepath.Join(p.tr.Dir, filepath.FromSlash(s.Screenshots.After)))
	if err != nil {
		return res, fmt.Errorf("the recorded screenshot: %w", err)
	}
	d, err := DecodedDistance(want, got)
	if err != nil {
		return res, err
	}
	res.Distance = &d
	res.Outcome = OutcomeMatched
	if d > p.opts.Threshold {
		res.Outcome = OutcomeDiverged
		res.Reason = fmt.Sprintf("%s %.4f > %g", Mismatch, d, p.opts.Threshold)
	}
	return res, nil
}

func (p *player) exec(ctx context.Context, s api.TrajectoryStep, res StepResult) (StepResult, error) {
	var req api.ExecRequest
	if err := json.Unmarshal(s.Request, &req); err != nil || len(req.Argv) == 0 {
		// The farm keeps an exec step's argv and sizes, not its request
		// (stdin may be large): run the argv again.
		req = api.ExecRequest{}
		if s.Exec != nil {
			req.Argv = s.Exec.Argv
		}
	}
	if len(req.Argv) == 0 {
		res.Outcome, res.Reason = OutcomeSkipped, "no exec argv recorded"
		return res, nil
	}
	out, err := p.c.Exec(ctx, p.target, req)
	if err != nil {
		return failed(s, res, err)
	}
	res.Outcome = OutcomePlayed
	if s.Exec != nil && out.ExitCode != s.Exec.ExitCode {
		res.Outcome, res.Reason = OutcomeDiverged, fmt.Sprintf("exit code %d, recorded %d", out.ExitCode, s.Exec.ExitCode)
	}
	return res, nil
}

// failed judges a step the farm refused: as recorded if the recording
// failed too, diverged if not. An error that is not the farm's answer is
// the replay's own.
func failed(s api.TrajectoryStep, res StepResult, err error) (StepResult, error) {
	if _, ok := errors.AsType[*api.Error](err); !ok {
		return res, err
	}
	if s.IsError {
		res.Outcome, res.Reason = OutcomePlayed, "failed as recorded: "+err.Error()
	} else {
		res.Outcome, res.Reason = OutcomeDiverged, "the replay failed where the recording did not: "+err.Error()
	}
	return res, nil
}

// snapshot saves, reverts to or deletes the named snapshot on the replay's
// episode, as the recording did: a trajectory that went back to a
// checkpoint goes back in the replay too.
func (p *player) snapshot(ctx context.Context, s api.TrajectoryStep, res StepResult) (StepResult, error) {
	var err error
	switch name := s.Snapshot.Name; s.Snapshot.Op {
	case api.SnapshotSave:
		_, err = p.c.SaveSnapshot(ctx, p.target, name)
	case api.SnapshotRevert:
		_, err = p.c.RevertSnapshot(ctx, p.target, name)
	case api.SnapshotDelete:
		err = p.c.DeleteSnapshot(ctx, p.target, name)
	default:
		res.Outcome, res.Reason = OutcomeSkipped, fmt.Sprintf("unknown snapshot op %q", s.Snapshot.Op)
		return res, nil
	}
	if err != nil {
		return failed(s, res, err)
	}
	res.Outcome = OutcomePlayed
	if s.IsError {
		res.Outcome, res.Reason = OutcomeDiverged, "the replay's "+s.Snapshot.Op+" succeeded where the recording's failed"
	}
	return res, nil
}

func (p *player) fileWrite(ctx context.Context, s api.TrajectoryStep, res StepResult) (StepResult, error) {
	f, err := os.Open(filepath.Join(p.tr.Dir, filepath.FromSlash(s.File.Kept)))
	if err != nil {
		return res, fmt.Errorf("the kept file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return res, err
	}
	if err := p.c.WriteFile(ctx, p.target, s.File.Path, f, st.Size(), 0o644); err != nil {
		if _, ok := errors.AsType[*api.Error](err); !ok {
			return res, err
		}
		res.Outcome, res.Reason = OutcomeDiverged, "the replay failed where the recording did not: "+err.Error()
		return res, nil
	}
	res.Outcome = OutcomePlayed
	return res, nil
}
