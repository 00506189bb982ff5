package web

import (
	"bytes"
	"net/http"
	"strconv"
	"time"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/desk"
)

const maxActionsBody = 4 << 20

func (s *server) noDisplay() error {
	return &httpError{status: http.StatusNotImplemented, code: api.CodeNoDisplay, msg: "this server has no display backend"}
}

func (s *server) act(w http.ResponseWriter, r *http.Request, t target) error {
	if s.desks == nil {
		return s.noDisplay()
	}
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
	if body.ScreenshotSize == "" {
		body.ScreenshotSize = t.screenshotSize
	}
	size, err := parseSize(body.ScreenshotSize)
	if err != nil {
		return err
	}
	d, err := s.desks.Get(t.ctx, t.vm)
	if err != nil {
		return err
	}
	start := time.Now()
	res, err := d.Run(t.ctx, size, acts, opts)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, actionsResponse(res.Result, res.Screenshot.X, res.Screenshot.Y, time.Since(start)))
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
func (s *server) screenshot(w http.ResponseWriter, r *http.Request, t target) error {
	if s.desks == nil {
		return s.noDisplay()
	}
	q := r.URL.Query()
	opts := desk.ScreenshotOptions{Encode: actions.EncodeOptions{Format: actions.ImageFormat(q.Get("format"))}}
	if v := q.Get("quality"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return invalidf("quality", "%q is not a number (1-100)", v)
		}
		opts.Encode.Quality = n
	}
	if err := opts.Encode.Validate(); err != nil {
		return err
	}
	size := "native"
	if t.screenshotSize != "" {
		size = t.screenshotSize
	}
	wq, hq := q.Get("width"), q.Get("height")
	switch {
	case wq != "" && hq != "":
		size = wq + "x" + hq
	case wq != "" || hq != "":
		return invalidf("width", "give both width and height, or neither")
	case q.Get("size") != "":
		size = q.Get("size")
	}
	var err error
	if opts.Size, err = parseSize(size); err != nil {
		return err
	}
	switch q.Get("fresh") {
	case "", "false", "0":
	case "true", "1":
		opts.Fresh = true
	default:
		return invalidf("fresh", "%q: accepted values are true and false", q.Get("fresh"))
	}
	d, err := s.desks.Get(t.ctx, t.vm)
	if err != nil {
		return err
	}
	out, mt, err := d.Screenshot(t.ctx, opts)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", mt)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, err = w.Write(out)
	return err
}
