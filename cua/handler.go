package cua

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/atspi"
	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/guestx"
	"github.com/deskfarm/deskfarm/player"
	"github.com/gorilla/websocket"
)

// Runner plays actions on a VM's display: a *desk.Desk. Run refuses with a
// *desk.HumanControlError while a person holds control; Human says whether
// one does, for the window commands, which change the desktop through the
// guest rather than by playing actions.
type Runner interface {
	Run(ctx context.Context, size player.ScreenshotSize, acts []actions.Action, opts player.RunOptions) (desk.RunResult, error)
	Human() (since time.Time, ok bool)
}

// Screen takes screenshots of a VM's display: a *desk.Desk.
type Screen interface {
	Screenshot(ctx context.Context, o desk.ScreenshotOptions) ([]byte, string, error)
}

// Target is the VM a Handler drives.
type Target struct {
	// VM is the VM's id, for logs.
	VM     string
	Runner Runner
	Screen Screen
	Guest  Guest
}

// Options configures a Handler. The zero value serves the desktop image.
type Options struct {
	// Home is where relative paths resolve and guest commands start; ""
	// means the desktop user's home (guestx.Home). Commands always run as
	// the desktop user, guestx.User.
	Home string
	// CheckOrigin decides whether a websocket upgrade may come from the
	// request's Origin; nil accepts requests without an Origin header and
	// those whose Origin host is the Host they were sent to.
	CheckOrigin func(*http.Request) bool
	// Log gets one debug line per command; nil means slog.Default().
	Log *slog.Logger
	// Step, when set, is told of each command before it runs, with the
	// request as the client sent it; the command runs in the context it
	// returns, and done is called with the reply once it is encoded (a
	// recorded trajectory's step: web/cua.go).
	Step func(ctx context.Context, command string, req []byte) (_ context.Context, done func(reply []byte, err error))
}

// Limits. Cua's client refuses websocket frames over 10 MiB
// (websocket_max_size) and sends files over 5 MiB in 1 MiB chunks; a
// direct write_text of a bigger file needs more room on REST.
const (
	maxBody      = 16 << 20
	maxWSMessage = 16 << 20
	// wsQueue is how many requests a websocket reads ahead of the one
	// running (the client's own max_queue is 32).
	wsQueue      = 32
	wsWriteLimit = 30 * time.Second
)

// Handler serves Cua's computer-server protocol for one VM (see the package
// doc for the routes and commands).
type Handler struct {
	t    Target
	s    session
	opts Options
	log  *slog.Logger
}

// NewHandler returns the handler for t.
func NewHandler(t Target, opts Options) *Handler {
	if opts.Home == "" {
		opts.Home = guestx.Home
	}
	if opts.CheckOrigin == nil {
		opts.CheckOrigin = sameOrigin
	}
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	return &Handler{t: t, s: session{g: t.Guest, vm: t.VM, home: opts.Home}, opts: opts, log: log}
}

// ServeHTTP routes /cmd, /ws, /status and the refused Cua routes.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	switch {
	case path == "/cmd":
		if r.Method != http.MethodPost {
			detail(w, http.StatusMethodNotAllowed, "Method Not Allowed")
			return
		}
		h.cmd(w, r)
	case path == "/ws":
		h.ws(w, r)
	case path == "/commands":
		writeJSON(w, http.StatusOK, commandList())
	case path == "/status":
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "os_type": "linux", "features": []string{}})
	case path == "/pty" || strings.HasPrefix(path, "/pty/") || path == "/playwright_exec" || path == "/responses":
		writeJSON(w, http.StatusConflict, unsupportedReply{Code: "unsupported",
			Error: "deskfarm serves Cua's computer-server commands only: " + path + " is not available"})
	default:
		detail(w, http.StatusNotFound, "Not Found")
	}
}

// request is a command on the wire.
type request struct {
	Command string          `json:"command"`
	Params  json.RawMessage `json:"params"`
}

// cmd answers one POST /cmd: one "data: " frame on HTTP 200, or a FastAPI
// style 400 for what Cua's server refuses before running anything.
func (h *Handler) cmd(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		detail(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("Invalid JSON body: %v", err))
		return
	}
	var req request
	if err := json.Unmarshal(body, &req); err != nil {
		detail(w, http.StatusBadRequest, fmt.Sprintf("Invalid JSON body: %v", err))
		return
	}
	if req.Command == "" {
		detail(w, http.StatusBadRequest, "Command is required")
		return
	}
	o, err := parse(req.Command, req.Params, h.opts.Home)
	if _, auth := o.(authOp); errors.Is(err, errUnknownCommand) || auth {
		if auth {
			err = fmt.Errorf("Unknown command: authenticate: %w", errUnknownCommand)
		}
		h.log.Debug("cua command", "vm", h.t.VM, "op", "cua", "command", req.Command, "err", err)
		detail(w, http.StatusBadRequest, strings.TrimSuffix(err.Error(), ": "+errUnknownCommand.Error()))
		return
	}
	reply := h.answer(r.Context(), body, req.Command, o, err)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	frame := make([]byte, 0, len(reply)+8)
	frame = append(append(append(frame, "data: "...), reply...), "\n\n"...)
	w.Write(frame) //nolint:errcheck // the client went away; nothing to tell it
}

// answer runs a parsed command (or reports its parse error) and encodes
// the answer object; raw is the request as sent.
func (h *Handler) answer(ctx context.Context, raw []byte, command string, o op, err error) []byte {
	var done func([]byte, error)
	if h.opts.Step != nil {
		ctx, done = h.opts.Step(ctx, command, raw)
	}
	start := time.Now()
	var fields any
	if err == nil {
		fields, err = h.do(ctx, o)
	}
	lvl := slog.LevelDebug
	if err != nil && ctx.Err() == nil {
		lvl = slog.LevelInfo
	}
	h.log.Log(ctx, lvl, "cua command", "vm", h.t.VM, "op", "cua", "command", command,
		"elapsed_ms", time.Since(start).Milliseconds(), "err", err)
	reply := encode(fields, err)
	if done != nil {
		done(reply, err)
	}
	return reply
}

// ws serves the websocket: requests are read ahead (so pings are answered
// while a command runs) and answered one at a time, in order.
func (h *Handler) ws(w http.ResponseWriter, r *http.Request) {
	up := websocket.Upgrader{ReadBufferSize: 4096, WriteBufferSize: 64 << 10, CheckOrigin: h.opts.CheckOrigin}
	conn, err := up.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader answered
	}
	defer conn.Close()
	conn.SetReadLimit(maxWSMessage)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	reqs := make(chan []byte, wsQueue)
	go func() {
		defer close(reqs)
		defer cancel() // the client left: stop the command running for it
		for {
			_, msg, err := conn.ReadMessage()
			if err != nil {
				return
			}
			select {
			case reqs <- msg:
			case <-ctx.Done():
				return
			}
		}
	}()
	// An episode's end cancels the request's context: close the socket
	// so the reader ends too.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	for msg := range reqs {
		reply := h.wsAnswer(ctx, msg)
		conn.SetWriteDeadline(time.Now().Add(wsWriteLimit)) //nolint:errcheck // a failed write reports it
		if err := conn.WriteMessage(websocket.TextMessage, reply); err != nil {
			return
		}
	}
}

func (h *Handler) wsAnswer(ctx context.Context, msg []byte) []byte {
	var req request
	if err := json.Unmarshal(msg, &req); err != nil {
		return encode(nil, fmt.Errorf("Invalid JSON: %v", err))
	}
	o, err := parse(req.Command, req.Params, h.opts.Home)
	if errors.Is(err, errUnknownCommand) {
		err = errors.New(strings.TrimSuffix(err.Error(), ": "+errUnknownCommand.Error()))
	}
	return h.answer(ctx, msg, req.Command, o, err)
}

// native is the screen's own pixels: Cua's coordinates.
var native = player.ScreenshotSize{Mode: player.SizeNative}

// quiet asks Run for no screenshot.
var quiet = player.RunOptions{Screenshot: player.ScreenshotNever}

// do carries out one op.
func (h *Handler) do(ctx context.Context, o op) (any, error) {
	switch o := o.(type) {
	case versionOp:
		return versionReply{Protocol: 1, Package: "deskfarm"}, nil
	case authOp:
		return authReply{Message: "Authentication successful"}, nil
	case unsupportedOp:
		return unsupportedReply{Code: "unsupported",
			Error: o.command + " is not served by deskfarm's Cua endpoint (see package cua)"}, nil
	case screenSizeOp:
		// An empty run plays nothing and reports the screen's size.
		res, err := h.t.Runner.Run(ctx, native, nil, quiet)
		if err != nil {
			return nil, err
		}
		return screenSizeReply{Size: screenSize{Width: res.Screenshot.X, Height: res.Screenshot.Y}}, nil
	case cursorOp:
		res, err := h.t.Runner.Run(ctx, native, []actions.Action{actions.CursorPosition{}}, quiet)
		if err != nil {
			return nil, err
		}
		if res.Cursor == nil {
			return nil, errors.New("cursor position: the run reported none")
		}
		var out cursorReply
		out.Position.X, out.Position.Y = res.Cursor.X, res.Cursor.Y
		return out, nil
	case inputOp:
		if len(o.acts) == 0 {
			return struct{}{}, nil
		}
		if _, err := h.t.Runner.Run(ctx, native, o.acts, quiet); err != nil {
			return nil, err
		}
		return struct{}{}, nil
	case clipboardGetOp:
		res, err := h.t.Runner.Run(ctx, native, []actions.Action{actions.ClipboardGet{}}, quiet)
		if err != nil {
			return nil, err
		}
		if res.Clipboard == nil {
			return nil, errors.New("copy_to_clipboard: the run read no clipboard")
		}
		return contentReply{Content: *res.Clipboard}, nil
	case screenshotOp:
		// Fresh: a run_command may have changed the screen while QEMU's
		// refresh timer idled.
		img, _, err := h.t.Screen.Screenshot(ctx, desk.ScreenshotOptions{Size: native, Fresh: true,
			Encode: player.EncodeOptions{Format: o.format, Quality: o.quality}})
		if err != nil {
			return nil, fmt.Errorf("Screenshot error: %w", err)
		}
		return screenshotReply{ImageData: base64.StdEncoding.EncodeToString(img), Format: string(o.format)}, nil
	case shellOp:
		return h.s.shell(ctx, o)
	case fileOp:
		return h.s.file(ctx, o)
	case launchOp:
		return h.s.launch(ctx, o)
	case treeOp:
		tree, err := h.s.tree(ctx)
		if errors.Is(err, atspi.ErrUnavailable) {
			return unsupportedReply{Code: "unsupported", Error: "get_accessibility_tree: " + err.Error() +
				"; deskfarm's osworld image has it"}, nil
		}
		if err != nil {
			return nil, err
		}
		return treeReply{Tree: tree}, nil
	case windowOp:
		if o.command == "set_window_size" || o.command == "set_window_position" ||
			o.command == "minimize_window" || o.command == "activate_window" {
			if since, ok := h.t.Runner.Human(); ok {
				return nil, &desk.HumanControlError{VM: h.t.VM, Since: since}
			}
		}
		return h.s.window(ctx, o)
	}
	return nil, fmt.Errorf("internal: no way to run %T", o)
}

func detail(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"detail": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v) //nolint:errcheck // the client went away; nothing to tell it
}

// sameOrigin accepts requests without an Origin (not from a browser: Cua's
// Python client sends none) and browser requests whose Origin host is the
// Host they were sent to.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	_, host, ok := strings.Cut(o, "://")
	return ok && strings.EqualFold(host, r.Host)
}
