package osworld

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/deskfarm/deskfarm/vmm"
)

// Defaults of Options.
const (
	// DefaultExecTimeout is /execute's timeout when the request names none
	// (subprocess.run's timeout=120 in OSWorld's server).
	DefaultExecTimeout = 120 * time.Second
	// DefaultOpenTimeout bounds /setup/open_file's wait for the window:
	// OSWorld's server's TIMEOUT (1800 s), which its client's 1810 s
	// timeout is built around.
	DefaultOpenTimeout = 1800 * time.Second
	// openPoll is how often /setup/open_file looks for the window (1 s in
	// OSWorld's server).
	openPoll = time.Second
	// maxUpload bounds a /setup/upload body: the guest agent's file limit.
	maxUpload = vmm.MaxFileSize
)

// Options configures NewHandler. Zero values take the defaults noted.
type Options struct {
	// VM names the VM in logs.
	VM string
	// Network is the VM's network mode (vmm.NetworkNone, vmm.NetworkUser);
	// "" means not known. A VM of NetworkNone has no route out (its NIC,
	// if it has forwards, drops everything else), so /setup/download_file
	// fails at once instead of waiting out three 300 s socket timeouts.
	Network string
	// OpenTimeout bounds /setup/open_file; default DefaultOpenTimeout.
	OpenTimeout time.Duration
	// Recorder encodes /start_recording's video; default an FFmpeg with
	// its defaults.
	Recorder *FFmpeg
	// Log receives structured logs (keys vm, op). Default slog.Default().
	Log *slog.Logger
}

// Handler serves OSWorld's in-VM routes for one VM.
type Handler struct {
	g    Guest
	opts Options
	log  *slog.Logger
	mux  *http.ServeMux
	rec  *recording
	// clock paces /execute_with_verification's poll.
	clock clock
}

// NewHandler returns the OSWorld handler of one VM.
func NewHandler(g Guest, opts Options) *Handler {
	if opts.OpenTimeout == 0 {
		opts.OpenTimeout = DefaultOpenTimeout
	}
	if opts.Recorder == nil {
		opts.Recorder = &FFmpeg{}
	}
	h := &Handler{g: g, opts: opts, log: opts.Log, mux: http.NewServeMux(), clock: realClock{}}
	if h.log == nil {
		h.log = slog.Default()
	}
	h.rec = &recording{enc: opts.Recorder}
	for _, r := range []struct {
		pattern string
		fn      http.HandlerFunc
	}{
		{"GET /screenshot", h.screenshot},
		{"POST /screen_size", h.screenSize},
		{"POST /execute", h.execute},
		{"POST /setup/execute", h.execute},
		{"POST /execute_with_verification", h.executeWithVerification},
		{"POST /setup/execute_with_verification", h.executeWithVerification},
		{"POST /run_python", h.runPython},
		{"POST /run_bash_script", h.runBashScript},
		{"POST /file", h.file},
		{"POST /setup/upload", h.upload},
		{"POST /setup/download_file", h.downloadFile},
		{"POST /setup/launch", h.launch},
		{"POST /setup/open_file", h.openFile},
		{"POST /setup/activate_window", h.windowAction("a")},
		{"POST /setup/close_window", h.windowAction("c")},
		{"POST /setup/change_wallpaper", h.changeWallpaper},
		{"GET /accessibility", h.accessibility},
		{"GET /terminal", h.terminal},
		{"GET /cursor_position", h.cursorPosition},
		{"POST /window_size", h.windowSize},
		{"POST /desktop_path", h.desktopPath},
		{"POST /wallpaper", h.wallpaper},
		{"POST /list_directory", h.listDirectory},
		{"GET /platform", h.platform},
		{"POST /start_recording", h.startRecording},
		{"POST /end_recording", h.endRecording},
	} {
		h.mux.HandleFunc(r.pattern, r.fn)
	}
	return h
}

// ServeHTTP serves one OSWorld request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// Close stops a recording in progress and removes its files.
func (h *Handler) Close() { h.rec.abort() }

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"status":"error","message":"encode answer"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

func writeText(w http.ResponseWriter, status int, s string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8") // Flask's default for a str
	w.WriteHeader(status)
	io.WriteString(w, s)
}

type errorBody struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

func (h *Handler) fail(w http.ResponseWriter, r *http.Request, op string, status int, err error) {
	h.log.Warn("osworld request failed", "vm", h.opts.VM, "op", op, "path", r.URL.Path, "status", status, "err", err)
	writeJSON(w, status, errorBody{"error", err.Error()})
}

// readJSON reads a JSON object body; OSWorld's routes read request.json,
// which a missing or non-JSON body turns into an error before the route
// runs.
func readJSON(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("%w: read body: %w", ErrBadRequest, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: body: %w", ErrBadRequest, err)
	}
	return nil
}

func (h *Handler) screenshot(w http.ResponseWriter, r *http.Request) {
	b, err := h.g.Screenshot(r.Context())
	if err != nil {
		h.fail(w, r, "screenshot", http.StatusServiceUnavailable, err)
		return
	}
	w.Header().Set("Content-Type", "image/png")
	w.Header().Set("Content-Disposition", `inline; filename=screenshot.png`)
	w.Write(b)
}

func (h *Handler) screenSize(w http.ResponseWriter, r *http.Request) {
	f, err := h.g.Frames(r.Context())
	if err != nil {
		h.fail(w, r, "screen_size", http.StatusInternalServerError, err)
		return
	}
	b := f.Snapshot().Bounds()
	writeJSON(w, http.StatusOK, map[string]int{"width": b.Dx(), "height": b.Dy()})
}

// execResult is /execute's success body.
type execResult struct {
	Status     string `json:"status"`
	Output     string `json:"output"`
	Error      string `json:"error"`
	ReturnCode int    `json:"returncode"`
}

func (h *Handler) execute(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if err != nil {
		h.fail(w, r, "execute", http.StatusBadRequest, err)
		return
	}
	c, err := parseCommand(body, DefaultHome)
	if err != nil {
		// OSWorld's server raises inside its try (subprocess.run of a bad
		// command): a 500 with status error.
		h.fail(w, r, "execute", http.StatusInternalServerError, err)
		return
	}
	res, err := h.runCommand(r.Context(), c)
	if err != nil {
		h.fail(w, r, "execute", http.StatusInternalServerError, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// runCommand runs a parsed /execute command in the guest, as OSWorld's
// server does (an agent's pyautogui code runs there on the image's
// pyautogui; the actions route's "pyautogui" tool is the host-played
// path). An error means it could not run.
func (h *Handler) runCommand(ctx context.Context, c command) (execResult, error) {
	timeout := DefaultExecTimeout
	if c.Timeout > 0 {
		timeout = time.Duration(c.Timeout * float64(time.Second))
	}
	res, err := h.g.Run(ctx, Cmd{Argv: c.Argv, Timeout: timeout})
	if err != nil {
		return execResult{}, err
	}
	return execResult{"success", string(res.Stdout), string(res.Stderr), res.ExitCode}, nil
}

func randomName() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// runPythonResult is /run_python's body.
type runPythonResult struct {
	Status     string  `json:"status"`
	Message    string  `json:"message"`
	NeedMore   bool    `json:"need_more"`
	Output     *string `json:"output"`
	Error      string  `json:"error"`
	ReturnCode *int    `json:"return_code,omitempty"`
}

func (h *Handler) runPython(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Code string `json:"code"`
	}
	if err := readJSON(r, &req); err != nil {
		h.fail(w, r, "run_python", http.StatusBadRequest, err)
		return
	}
	if req.Code == "" {
		writeJSON(w, http.StatusBadRequest, errorBody{"error", "Code not supplied!"})
		return
	}
	file := "/tmp/python_exec_" + randomName() + ".py"
	if err := h.g.WriteFile(r.Context(), file, []byte(req.Code)); err != nil {
		writeJSON(w, http.StatusInternalServerError, runPythonResult{Status: "error", Message: "Execution error: " + err.Error(), Error: err.Error()})
		return
	}
	defer h.g.Run(context.WithoutCancel(r.Context()), Cmd{Argv: []string{"rm", "-f", file}, Timeout: time.Minute})
	res, err := h.g.Run(r.Context(), Cmd{Argv: []string{"/usr/bin/python3", file}, Timeout: time.Minute})
	if errors.Is(err, vmm.ErrTimeout) {
		writeJSON(w, http.StatusInternalServerError, runPythonResult{Status: "error",
			Message: "Execution timeout: Code took too long to execute", Error: "TimeoutExpired"})
		return
	}
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, runPythonResult{Status: "error", Message: "Execution error: " + err.Error(), Error: err.Error()})
		return
	}
	out, errOut := string(res.Stdout), string(res.Stderr)
	msg := out
	if errOut != "" {
		if out != "" {
			msg += "\n"
		}
		msg += errOut
	}
	status := "success"
	if res.ExitCode != 0 {
		status = "error"
		if errOut == "" {
			errOut = fmt.Sprintf("Process exited with code %d", res.ExitCode)
			if msg != "" {
				msg += "\n"
			}
			msg += errOut
		}
	}
	rc := res.ExitCode
	writeJSON(w, http.StatusOK, runPythonResult{Status: status, Message: msg, Output: &out, Error: errOut, ReturnCode: &rc})
}

// bashResult is /run_bash_script's body.
type bashResult struct {
	Status     string `json:"status"`
	Output     string `json:"output"`
	Error      string `json:"error"`
	ReturnCode int    `json:"returncode"`
}

// runBashScript is osworld-server's fixed /run_bash_script (OSWorld main's
// answers 500 always: it calls an undefined _append_event).
func (h *Handler) runBashScript(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Script     string   `json:"script"`
		Timeout    *float64 `json:"timeout"`
		WorkingDir string   `json:"working_dir"`
	}
	if err := readJSON(r, &req); err != nil {
		h.fail(w, r, "run_bash_script", http.StatusBadRequest, err)
		return
	}
	if req.Script == "" {
		writeJSON(w, http.StatusBadRequest, bashResult{"error", "Script not supplied!", "", -1})
		return
	}
	timeout := 100.0
	if req.Timeout != nil {
		timeout = *req.Timeout
	}
	dir := ""
	if req.WorkingDir != "" {
		dir = expandPath(req.WorkingDir, DefaultUser, DefaultHome)
		res, err := h.g.Run(r.Context(), Cmd{Argv: []string{"test", "-e", dir}, Timeout: time.Minute})
		if err != nil {
			writeJSON(w, http.StatusInternalServerError, bashResult{"error", "Failed to execute script: " + err.Error(), "", -1})
			return
		}
		if res.ExitCode != 0 {
			writeJSON(w, http.StatusBadRequest, bashResult{"error", "Working directory does not exist: " + dir, "", -1})
			return
		}
	}
	script := req.Script
	if !strings.Contains(script, "#!/bin/bash") {
		script = "#!/bin/bash\n\n" + script
	}
	file := "/tmp/deskfarm_script_" + randomName() + ".sh"
	if err := h.g.WriteFile(r.Context(), file, []byte(script)); err != nil {
		writeJSON(w, http.StatusInternalServerError, bashResult{"error", "Failed to execute script: " + err.Error(), "", -1})
		return
	}
	defer h.g.Run(context.WithoutCancel(r.Context()), Cmd{Argv: []string{"rm", "-f", file}, Timeout: time.Minute})
	res, err := h.g.Run(r.Context(), Cmd{Argv: []string{"/bin/bash", file}, Dir: dir, MergeStderr: true,
		Timeout: time.Duration(timeout * float64(time.Second))})
	if errors.Is(err, vmm.ErrTimeout) {
		writeJSON(w, http.StatusInternalServerError, bashResult{"error", fmt.Sprintf("Script execution timed out after %v seconds", pyNum(timeout)), "", -1})
		return
	}
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, bashResult{"error", "Failed to execute script: " + err.Error(), "", -1})
		return
	}
	status := "success"
	if res.ExitCode != 0 {
		status = "error"
	}
	writeJSON(w, http.StatusOK, bashResult{status, string(res.Stdout), "", res.ExitCode})
}

// pyNum formats a number as Python's str() of the JSON value would: 100
// for an int, 2.5 for a float.
func pyNum(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// formValue reads a form field from an urlencoded or multipart body, as
// Flask's request.form.
func formValue(r *http.Request, key string) (string, bool) {
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct == "multipart/form-data" {
		if err := r.ParseMultipartForm(32 << 20); err != nil {
			return "", false
		}
	} else if err := r.ParseForm(); err != nil {
		return "", false
	}
	if r.PostForm == nil {
		return "", false
	}
	v, ok := r.PostForm[key]
	if !ok || len(v) == 0 {
		return "", false
	}
	return v[0], true
}

// exists tells whether a guest path exists (0), names a program (4) or
// neither (3), as the desktop user sees it.
func (h *Handler) exists(ctx context.Context, p string) (int, error) {
	res, err := h.g.Run(ctx, Cmd{Argv: []string{"/bin/sh", "-c", existsScript, "exists", p}, Timeout: time.Minute})
	if err != nil {
		return 0, err
	}
	return res.ExitCode, nil
}

func (h *Handler) file(w http.ResponseWriter, r *http.Request) {
	p, ok := formValue(r, "file_path")
	if !ok {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "file_path is required"})
		return
	}
	p = absGuestPath(expandPath(p, DefaultUser, DefaultHome), DefaultHome)
	code, err := h.exists(r.Context(), p)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "Failed to serve file: " + err.Error()})
		return
	}
	if code != 0 {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "File not found"})
		return
	}
	b, err := h.g.ReadFile(r.Context(), p)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "Failed to serve file: " + err.Error()})
		return
	}
	sendFile(w, path.Base(p), "", b)
}

// sendFile answers as Flask's send_file(as_attachment=True).
func sendFile(w http.ResponseWriter, name, ctype string, b []byte) {
	if ctype == "" {
		ctype = mime.TypeByExtension(path.Ext(name))
	}
	if ctype == "" {
		ctype = "application/octet-stream"
	}
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name}))
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.Write(b)
}

func (h *Handler) upload(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxUpload+1<<20)
	if err := r.ParseMultipartForm(32 << 20); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "file_path and file_data are required"})
		return
	}
	p := r.FormValue("file_path")
	f, _, err := r.FormFile("file_data")
	if p == "" || err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "file_path and file_data are required"})
		return
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "Failed to upload file: " + err.Error()})
		return
	}
	p = absGuestPath(expandPath(p, DefaultUser, DefaultHome), DefaultHome)
	if err := h.g.WriteFile(r.Context(), p, data); err != nil {
		h.log.Warn("osworld upload failed", "vm", h.opts.VM, "op", "upload", "path", p, "err", err)
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "Failed to upload file: " + err.Error()})
		return
	}
	writeText(w, http.StatusOK, fmt.Sprintf("File Uploaded: %d bytes", len(data)))
}

func (h *Handler) platform(w http.ResponseWriter, r *http.Request) {
	writeText(w, http.StatusOK, "Linux")
}

func (h *Handler) startRecording(w http.ResponseWriter, r *http.Request) {
	f, err := h.g.Frames(r.Context())
	if err != nil {
		h.fail(w, r, "start_recording", http.StatusInternalServerError, err)
		return
	}
	if err := h.rec.start(r.Context(), f, h.opts.VM, h.log); err != nil {
		if errors.Is(err, errRecording) {
			writeJSON(w, http.StatusBadRequest, errorBody{"error", "Recording is already in progress."})
			return
		}
		h.fail(w, r, "start_recording", http.StatusInternalServerError, fmt.Errorf("Failed to start recording. %w", err))
		return
	}
	h.log.Info("osworld recording started", "vm", h.opts.VM, "op", "start_recording")
	writeJSON(w, http.StatusOK, errorBody{"success", "Started recording successfully."})
}

func (h *Handler) endRecording(w http.ResponseWriter, r *http.Request) {
	b, err := h.rec.stop(r.Context())
	if errors.Is(err, errNotRecording) {
		writeJSON(w, http.StatusBadRequest, errorBody{"error", "No recording in progress to stop."})
		return
	}
	if err != nil {
		h.fail(w, r, "end_recording", http.StatusInternalServerError, err)
		return
	}
	h.log.Info("osworld recording ended", "vm", h.opts.VM, "op", "end_recording", "bytes", len(b))
	sendFile(w, "recording.mp4", "video/mp4", b)
}

// pngSize reads a PNG's dimensions (tests and the benchmark).
func pngSize(b []byte) (int, int, error) {
	cfg, err := png.DecodeConfig(bytes.NewReader(b))
	return cfg.Width, cfg.Height, err
}

var pngEncode = png.Encode
