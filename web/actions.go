package web

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/api"
)

const maxActionsBody = 4 << 20

func (s *server) noDisplay() error {
	return &httpError{status: http.StatusNotImplemented, code: api.CodeNoDisplay, msg: "this server has no display backend"}
}

func (s *server) act(w http.ResponseWriter, r *http.Request) error {
	if s.desks == nil {
		return s.noDisplay()
	}
	id := vmID(r)
	var body api.ActionsRequest
	if err := decodeJSON(w, r, &body, maxActionsBody); err != nil {
		return err
	}
	acts, err := decodeActions(body)
	if err != nil {
		return err
	}
	opts := runOptions(body.RunOptions)
	if err := opts.Validate(); err != nil {
		return err
	}
	size, err := parseSize(body.ScreenshotSize)
	if err != nil {
		return err
	}
	d, err := s.desks.Get(r.Context(), id)
	if err != nil {
		return err
	}
	e, err := d.Executor(size)
	if err != nil {
		return err
	}
	start := time.Now()
	res, err := e.Run(r.Context(), acts, opts)
	if err != nil {
		return fmt.Errorf("actions on vm %s: %w", id, err)
	}
	s.activity.record(id, acts, res, e.Scaler())
	sw, sh := e.Scaler().ScreenshotSize()
	writeJSON(w, http.StatusOK, actionsResponse(res, sw, sh, time.Since(start)))
	return nil
}

// decodeActions turns the request into neutral actions.
func decodeActions(b api.ActionsRequest) ([]actions.Action, error) {
	set := 0
	for _, present := range []bool{b.Tool != "" || len(b.Input) > 0, len(b.Action) > 0, len(b.Actions) > 0} {
		if present {
			set++
		}
	}
	if set != 1 {
		return nil, invalidf("tool", "give exactly one of tool+input (a Claude computer-use call), action or actions")
	}
	switch {
	case b.Tool != "":
		if len(b.Input) == 0 {
			return nil, invalidf("input", "required with tool %q", b.Tool)
		}
		return actions.TranslateClaude(actions.ClaudeVersion(b.Tool), b.Input)
	case len(b.Input) > 0:
		return nil, invalidf("tool", "required with input: one of computer_20241022, computer_20250124, computer_20251124")
	case len(b.Action) > 0:
		return actions.DecodeActions(append(append([]byte("["), b.Action...), ']'))
	default:
		if bytes.HasPrefix(bytes.TrimSpace(b.Actions), []byte("{")) {
			return nil, invalidf("actions", "must be a list; use action for a single one")
		}
		return actions.DecodeActions(b.Actions)
	}
}

func parseSize(s string) (actions.ScreenshotSize, error) {
	if s == "" {
		s = "auto"
	}
	size, err := actions.ParseScreenshotSize(s)
	if err != nil {
		return size, invalidf("screenshot_size", "%v (accepted: auto, native, WxH)", err)
	}
	return size, nil
}

// screenshot serves GET /v1/vms/{id}/screenshot?format=png|jpeg&width=&height=&quality=&fresh=:
// the live framebuffer mirror (cursor included), scaled when asked.
func (s *server) screenshot(w http.ResponseWriter, r *http.Request) error {
	if s.desks == nil {
		return s.noDisplay()
	}
	q := r.URL.Query()
	opts := actions.EncodeOptions{Format: actions.ImageFormat(q.Get("format"))}
	if v := q.Get("quality"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return invalidf("quality", "%q is not a number (1-100)", v)
		}
		opts.Quality = n
	}
	if err := opts.Validate(); err != nil {
		return err
	}
	size := "native"
	wq, hq := q.Get("width"), q.Get("height")
	switch {
	case wq != "" && hq != "":
		size = wq + "x" + hq
	case wq != "" || hq != "":
		return invalidf("width", "give both width and height, or neither")
	case q.Get("size") != "":
		size = q.Get("size")
	}
	sz, err := parseSize(size)
	if err != nil {
		return err
	}
	d, err := s.desks.Get(r.Context(), vmID(r))
	if err != nil {
		return err
	}
	switch q.Get("fresh") {
	case "", "false", "0":
		// A copy of the live mirror, no round trip: actions settle before
		// they answer, so the mirror already shows their effect.
	case "true", "1":
		// The screen may have changed by other means (a command run through
		// the guest agent) while QEMU's refresh timer idles at up to 3 s:
		// prove the mirror current first (~30 ms).
		if _, err := d.Display.Settle(r.Context(), 0, time.Second); err != nil {
			return fmt.Errorf("screenshot of vm %s: %w: %w", vmID(r), actions.ErrDisplay, err)
		}
	default:
		return invalidf("fresh", "%q: accepted values are true and false", q.Get("fresh"))
	}
	img := d.Display.Snapshot()
	sc, err := actions.NewScaler(img.Bounds().Dx(), img.Bounds().Dy(), sz)
	if err != nil {
		return err
	}
	out, mt, err := actions.Encode(sc.Screenshot(img), opts)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", mt)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, err = w.Write(out)
	return err
}
