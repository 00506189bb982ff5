package osworld

// The routes that act on the desktop session: launching programs, opening
// files, windows, the wallpaper, accessibility, the terminal's text, the
// pointer, the desktop path and directory listings.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/deskfarm/deskfarm/atspi"
)

func (h *Handler) launch(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if err != nil {
		h.fail(w, r, "launch", http.StatusBadRequest, err)
		return
	}
	c, err := parseCommand(body, DefaultHome)
	if err != nil {
		h.fail(w, r, "launch", http.StatusInternalServerError, err)
		return
	}
	if c.Argv[0] != "/bin/sh" {
		// Popen of a missing program raises: check before detaching, where
		// the failure would be lost.
		if code, err := h.exists(r.Context(), c.Argv[0]); err != nil {
			h.fail(w, r, "launch", http.StatusInternalServerError, err)
			return
		} else if code == 3 {
			h.fail(w, r, "launch", http.StatusInternalServerError, fmt.Errorf("[Errno 2] No such file or directory: '%s'", c.Argv[0]))
			return
		}
	}
	argv := append([]string{"/bin/sh", "-c", launchScript, "launch"}, c.Argv...)
	res, err := h.g.Run(r.Context(), Cmd{Argv: argv, Timeout: time.Minute})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("launch %s: exit %d: %s", c.Text, res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	if err != nil {
		h.fail(w, r, "launch", http.StatusInternalServerError, err)
		return
	}
	writeText(w, http.StatusOK, c.Text+" launched successfully")
}

func (h *Handler) windows(ctx context.Context) ([]window, error) {
	return h.windowsWithin(ctx, time.Minute)
}

// windowsWithin lists the windows, giving the guest at most timeout.
func (h *Handler) windowsWithin(ctx context.Context, timeout time.Duration) ([]window, error) {
	res, err := h.g.Run(ctx, Cmd{Argv: []string{"/bin/sh", "-c", windowsScript}, Timeout: timeout})
	if err != nil {
		return nil, err
	}
	return parseWindows(string(res.Stdout)), nil
}

func (h *Handler) openFile(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Path string `json:"path"`
	}
	if err := readJSON(r, &req); err != nil {
		h.fail(w, r, "open_file", http.StatusBadRequest, err)
		return
	}
	if req.Path == "" {
		writeText(w, http.StatusBadRequest, "Path not supplied!")
		return
	}
	p := expandPath(req.Path, DefaultUser, DefaultHome)
	code, err := h.exists(r.Context(), p)
	if err != nil {
		writeText(w, http.StatusInternalServerError, fmt.Sprintf("Failed to open %s. Error: %v", req.Path, err))
		return
	}
	var name, stem string
	var argv []string
	switch code {
	case 0:
		p = absGuestPath(p, DefaultHome)
		name = path.Base(p)
		stem = strings.TrimSuffix(name, path.Ext(name))
		argv = []string{"/bin/sh", "-c", openScript, "open", p}
	case 4:
		name, stem = req.Path, req.Path
		argv = []string{"/bin/sh", "-c", launchScript, "launch", req.Path}
	default:
		writeText(w, http.StatusNotFound, "Application/file not found: "+req.Path)
		return
	}
	if res, err := h.g.Run(r.Context(), Cmd{Argv: argv, Timeout: 30 * time.Second}); err != nil || res.ExitCode != 0 {
		if err == nil {
			err = fmt.Errorf("exit %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
		}
		writeText(w, http.StatusInternalServerError, fmt.Sprintf("Failed to open %s. Error: %v", req.Path, err))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.opts.OpenTimeout)
	defer cancel()
	start := time.Now()
	for {
		ws, err := h.windows(ctx)
		if err == nil {
			if win, ok := matchOpened(ws, name, stem); ok {
				h.g.Run(ctx, Cmd{Argv: []string{"/bin/sh", "-c", activateIDScript, "activate", win.ID}, Timeout: time.Minute})
				h.log.Info("osworld file opened", "vm", h.opts.VM, "op", "open_file", "path", p, "window", win.Title, "wait", time.Since(start).Round(time.Millisecond))
				writeText(w, http.StatusOK, "File opened and window activated successfully")
				return
			}
		}
		select {
		case <-ctx.Done():
			if r.Context().Err() != nil {
				return // the client went away
			}
			writeText(w, http.StatusInternalServerError, fmt.Sprintf("Failed to find window for %s within %v seconds.", name, h.opts.OpenTimeout.Seconds()))
			return
		case <-time.After(openPoll):
		}
	}
}

// windowBody is activate_window's and close_window's body.
type windowBody struct {
	WindowName *string `json:"window_name"`
	Strict     bool    `json:"strict"`
	ByClass    bool    `json:"by_class"`
}

// windowAction is /setup/activate_window (a) and /setup/close_window (c):
// wmctrl's -a/-c, whose outcome OSWorld's server ignores: always 200 once
// the request names a window.
func (h *Handler) windowAction(action string) http.HandlerFunc {
	op, done := "activate_window", "Window activated successfully"
	if action == "c" {
		op, done = "close_window", "Window closed successfully."
	}
	return func(w http.ResponseWriter, r *http.Request) {
		var req windowBody
		if err := readJSON(r, &req); err != nil {
			h.fail(w, r, op, http.StatusBadRequest, err)
			return
		}
		if req.WindowName == nil || (action == "a" && *req.WindowName == "") {
			writeText(w, http.StatusBadRequest, "window_name required")
			return
		}
		flags := ""
		if req.ByClass {
			flags += "x"
		}
		if req.Strict {
			flags += "F"
		}
		re := regexp.QuoteMeta(*req.WindowName)
		if req.Strict {
			re = "^" + re + "$"
		}
		res, err := h.g.Run(r.Context(), Cmd{Argv: []string{"/bin/sh", "-c", windowActionScript, op, action, flags, *req.WindowName, re}, Timeout: time.Minute})
		if err != nil || res.ExitCode != 0 {
			h.log.Info("osworld window action had no effect", "vm", h.opts.VM, "op", op, "window", *req.WindowName, "err", err, "exit", res.ExitCode)
		}
		writeText(w, http.StatusOK, done)
	}
}

func (h *Handler) changeWallpaper(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Path string `json:"path"`
	}
	if err := readJSON(r, &req); err != nil {
		h.fail(w, r, "change_wallpaper", http.StatusBadRequest, err)
		return
	}
	if req.Path == "" {
		writeText(w, http.StatusBadRequest, "Path not supplied!")
		return
	}
	p := absGuestPath(expandPath(req.Path, DefaultUser, DefaultHome), DefaultHome)
	if code, err := h.exists(r.Context(), p); err != nil || code == 3 || code == 4 {
		if err != nil {
			writeText(w, http.StatusInternalServerError, fmt.Sprintf("Failed to change wallpaper. Error: %v", err))
			return
		}
		writeText(w, http.StatusNotFound, "File not found: "+p)
		return
	}
	res, err := h.g.Run(r.Context(), Cmd{Argv: []string{"/bin/sh", "-c", setWallpaperScript, "wallpaper", p}, Timeout: time.Minute})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	if err != nil {
		writeText(w, http.StatusInternalServerError, fmt.Sprintf("Failed to change wallpaper. Error: %v", err))
		return
	}
	writeText(w, http.StatusOK, "Wallpaper changed successfully")
}

func (h *Handler) accessibility(w http.ResponseWriter, r *http.Request) {
	out, err := h.g.A11y(r.Context(), atspi.ModeOSWorld)
	if err != nil {
		h.fail(w, r, "accessibility", http.StatusInternalServerError, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"AT": string(out)})
}

func (h *Handler) terminal(w http.ResponseWriter, r *http.Request) {
	out, err := h.g.A11y(r.Context(), atspi.ModeTerminal)
	if err != nil {
		h.fail(w, r, "terminal", http.StatusInternalServerError, err)
		return
	}
	var v struct {
		Output *string `json:"output"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		h.fail(w, r, "terminal", http.StatusInternalServerError, fmt.Errorf("terminal helper output: %w", err))
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Output *string `json:"output"`
		Status string  `json:"status"`
	}{v.Output, "success"})
}

// parseShellVars reads KEY=VALUE lines (xdotool's --shell output).
func parseShellVars(out string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), "="); ok {
			m[k] = v
		}
	}
	return m
}

func (h *Handler) cursorPosition(w http.ResponseWriter, r *http.Request) {
	// The pointer may have been moved inside the guest (pyautogui in a
	// setup step, xdotool): ask X, not what the host last sent.
	res, err := h.g.Run(r.Context(), Cmd{Argv: []string{"xdotool", "getmouselocation", "--shell"}, Timeout: time.Minute})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("xdotool getmouselocation: exit %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	if err != nil {
		h.fail(w, r, "cursor_position", http.StatusInternalServerError, err)
		return
	}
	v := parseShellVars(string(res.Stdout))
	x, errX := strconv.Atoi(v["X"])
	y, errY := strconv.Atoi(v["Y"])
	if errX != nil || errY != nil {
		h.fail(w, r, "cursor_position", http.StatusInternalServerError, fmt.Errorf("xdotool getmouselocation: unexpected output %q", res.Stdout))
		return
	}
	writeJSON(w, http.StatusOK, []int{x, y})
}

func (h *Handler) windowSize(w http.ResponseWriter, r *http.Request) {
	name, ok := formValue(r, "app_class_name")
	if !ok {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "app_class_name is required"})
		return
	}
	re := "^" + regexp.QuoteMeta(name) + "$"
	res, err := h.g.Run(r.Context(), Cmd{Argv: []string{"/bin/sh", "-c", windowSizeScript, "window_size", name, re}, Timeout: 60 * time.Second})
	if err != nil {
		h.fail(w, r, "window_size", http.StatusInternalServerError, err)
		return
	}
	v := parseShellVars(string(res.Stdout))
	wd, errW := strconv.Atoi(v["WIDTH"])
	ht, errH := strconv.Atoi(v["HEIGHT"])
	if res.ExitCode != 0 || errW != nil || errH != nil {
		// OSWorld's view returns None when no window matches, which Flask
		// answers with a 500.
		h.fail(w, r, "window_size", http.StatusInternalServerError, fmt.Errorf("no window of class %q", name))
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"width": wd, "height": ht})
}

func (h *Handler) desktopPath(w http.ResponseWriter, r *http.Request) {
	p := path.Join(DefaultHome, "Desktop")
	res, err := h.g.Run(r.Context(), Cmd{Argv: []string{"test", "-e", p}, Timeout: time.Minute})
	if err != nil {
		h.fail(w, r, "desktop_path", http.StatusInternalServerError, err)
		return
	}
	if res.ExitCode != 0 {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "Unsupported operating system or desktop path not found"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"desktop_path": p})
}

func (h *Handler) wallpaper(w http.ResponseWriter, r *http.Request) {
	res, err := h.g.Run(r.Context(), Cmd{Argv: []string{"/bin/sh", "-c", wallpaperScript}, Timeout: time.Minute})
	if err != nil {
		h.fail(w, r, "wallpaper", http.StatusInternalServerError, err)
		return
	}
	p := strings.TrimSpace(string(res.Stdout))
	if res.ExitCode != 0 || p == "" {
		writeText(w, http.StatusNotFound, "Wallpaper file not found")
		return
	}
	b, err := h.g.ReadFile(r.Context(), p)
	if err != nil {
		writeText(w, http.StatusInternalServerError, "Unable to serve the wallpaper file")
		return
	}
	sendFile(w, path.Base(p), "image/png", b)
}

func (h *Handler) listDirectory(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Path *string `json:"path"`
	}
	if err := readJSON(r, &req); err != nil {
		h.fail(w, r, "list_directory", http.StatusBadRequest, err)
		return
	}
	if req.Path == nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "Missing 'path' parameter"})
		return
	}
	res, err := h.g.Run(r.Context(), Cmd{Argv: []string{"python3", "-", *req.Path}, Stdin: []byte(listDirScript), Timeout: 60 * time.Second})
	if err != nil {
		h.fail(w, r, "list_directory", http.StatusInternalServerError, err)
		return
	}
	if res.ExitCode == 3 {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "The provided path is not a directory"})
		return
	}
	if res.ExitCode != 0 || !json.Valid(res.Stdout) {
		h.fail(w, r, "list_directory", http.StatusInternalServerError, fmt.Errorf("list %s: exit %d: %s", *req.Path, res.ExitCode, strings.TrimSpace(string(res.Stderr))))
		return
	}
	writeJSON(w, http.StatusOK, map[string]json.RawMessage{"directory_tree": res.Stdout})
}
