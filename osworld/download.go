package osworld

// /setup/download_file, the legacy download step: the guest fetches the
// URL itself. OSWorld's current download step fetches on the host and
// uploads (/setup/upload); this route is for harnesses from before that.

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/deskfarm/deskfarm/vmm"
)

// downloadTimeout bounds a whole /setup/download_file in the guest. OSWorld's
// server bounds only each socket operation (300 s, kept in download.py) and
// makes three attempts; a download that takes more than half an hour
// under TCG is not one a task needs, and a client that goes away ends it
// sooner (the request's context kills the guest process).
const downloadTimeout = 30 * time.Minute

func (h *Handler) downloadFile(w http.ResponseWriter, r *http.Request) {
	const op = "download_file"
	var req struct {
		URL  string `json:"url"`
		Path string `json:"path"`
	}
	if err := readJSON(r, &req); err != nil {
		h.fail(w, r, op, http.StatusBadRequest, err)
		return
	}
	if req.URL == "" || req.Path == "" {
		writeText(w, http.StatusBadRequest, "Path or URL not supplied!")
		return
	}
	failed := func(why string) {
		h.log.Warn("osworld download failed", "vm", h.opts.VM, "op", op, "url", req.URL, "err", why)
		writeText(w, http.StatusInternalServerError, fmt.Sprintf("Failed to download %s. No retries left. Error: %s", req.URL, why))
	}
	// requests, which OSWorld's server uses, fetches only http and https;
	// urllib would also read file: and ftp: URLs.
	if u, err := url.Parse(req.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		failed(fmt.Sprintf("Invalid URL %q: only http:// and https:// URLs with a host can be downloaded", req.URL))
		return
	}
	if h.opts.Network == vmm.NetworkNone {
		failed(fmt.Sprintf("the VM has no network route out (it was created with network %q); "+
			"create it with network %q for the guest to download, or use the download step, which fetches on the host",
			vmm.NetworkNone, vmm.NetworkUser))
		return
	}
	p := absGuestPath(expandPath(req.Path, DefaultUser, DefaultHome), DefaultHome)
	start := time.Now()
	res, err := h.g.Run(r.Context(), Cmd{Argv: []string{"python3", "-", req.URL, p}, Stdin: downloadScript, Timeout: downloadTimeout})
	if r.Context().Err() != nil {
		return // the client went away; the guest process was killed
	}
	out := strings.TrimSpace(string(res.Stdout))
	switch {
	case err != nil:
		failed(err.Error())
	case res.ExitCode == 0:
		n, perr := strconv.ParseInt(out, 10, 64)
		if perr != nil {
			failed(fmt.Sprintf("download helper printed %q", out))
			return
		}
		h.log.Info("osworld file downloaded", "vm", h.opts.VM, "op", op, "url", req.URL, "path", p, "bytes", n, "duration", time.Since(start).Round(time.Millisecond))
		writeText(w, http.StatusOK, fmt.Sprintf("File downloaded successfully: %d bytes", n))
	case res.ExitCode == 3 || res.ExitCode == 4:
		failed(out)
	default:
		msg := strings.TrimSpace(string(res.Stderr))
		if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
			msg = msg[i+1:] // the exception line of a traceback
		}
		failed(fmt.Sprintf("download helper exit %d: %s", res.ExitCode, msg))
	}
}
