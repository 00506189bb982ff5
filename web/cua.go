package web

import (
	"context"
	"image"
	"net/http"
	"time"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/cua"
	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/player"
)

// cua serves Cua's computer-server protocol for the target's VM under
// .../cua/ (package cua). Cua's Computer keeps the path prefix of its
// api_base_url, so one farm port serves every VM.
func (s *server) cua(w http.ResponseWriter, r *http.Request, t target) error {
	if s.desks == nil {
		return s.noDisplay()
	}
	d, err := s.desks.Get(t.ctx, t.vm)
	if err != nil {
		return err
	}
	tg := cua.Target{VM: t.vm, Runner: d, Screen: d, Guest: cua.FarmGuest{Farm: s.farm, VM: t.vm}}
	opts := cua.Options{CheckOrigin: checkOrigin, Log: s.log}
	if s.traj != nil {
		// Each command on a recorded VM is a step (record.go).
		tg.Runner, tg.Screen = cuaRunner{d}, cuaScreen{d}
		opts.Step = s.cuaStep(d)
	}
	h := cua.NewHandler(tg, opts)
	r2 := r.WithContext(t.ctx)
	u := *r.URL // WithContext shares the URL, which the request log reads
	u.Path, u.RawPath = "/"+r.PathValue("path"), ""
	r2.URL = &u
	h.ServeHTTP(w, r2)
	return nil
}

// cuaStep begins a step for each Cua command while d's VM is recorded,
// and ends it with the command as sent and the reply: the runs and the
// screenshot of the command reach its note through the context.
func (s *server) cuaStep(d *desk.Desk) func(context.Context, string, []byte) (context.Context, func([]byte, error)) {
	return func(ctx context.Context, command string, raw []byte) (context.Context, func([]byte, error)) {
		p := s.traj.Recorder(d.VM).Begin() // nil when not recorded
		if p == nil {
			return ctx, func([]byte, error) {}
		}
		n := &stepNote{kind: api.KindCua, start: time.Now(), pending: p}
		n.call.Kind, n.call.Tool = api.KindCua, "cua"
		// Cua's coordinates are the screen's own.
		w, h := d.Display.Size()
		n.call.ScreenshotSize = image.Pt(w, h)
		return context.WithValue(ctx, stepKey{}, n), func(reply []byte, err error) {
			c := &n.call
			c.Duration = time.Since(n.start)
			c.Request, c.Response = raw, reply
			c.Status, c.IsError = http.StatusOK, err != nil
			c.AfterImage = n.afterImage()
			n.pending.End(*c)
		}
	}
}

// cuaRunner is a desk that notes each run in the command's step.
type cuaRunner struct{ d *desk.Desk }

func (c cuaRunner) Run(ctx context.Context, size player.ScreenshotSize, acts []actions.Action, opts player.RunOptions) (desk.RunResult, error) {
	res, err := c.d.Run(ctx, size, acts, opts)
	noteFrom(ctx).played(acts, res.Result, err)
	return res, err
}

func (c cuaRunner) Human() (time.Time, bool) { return c.d.Human() }

// cuaScreen is a desk that notes the screenshot a command answered.
type cuaScreen struct{ d *desk.Desk }

func (c cuaScreen) Screenshot(ctx context.Context, o desk.ScreenshotOptions) ([]byte, string, error) {
	b, mt, err := c.d.Screenshot(ctx, o)
	if n := noteFrom(ctx); n != nil && err == nil {
		n.after = b
	}
	return b, mt, err
}
