package web

import (
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/deskfarm/deskfarm/pool"
	"github.com/deskfarm/deskfarm/vmm"
)

// The browser side: a dashboard (/) fed live by GET /v1/live, a wall of live thumbnails (/wall),
// a live view per VM (/vms/{id}) and the recorded trajectories (/trajectories, /trajectories/{id}),
// built from the embedded files in assets/.
// noVNC, used only to take over a VM, is served from a directory on disk
// (Options.NoVNCDir) at /novnc/, so a fresh clone builds without npm.

//go:embed assets/*.html assets/*.js assets/*.css
var assetFS embed.FS

var pages = template.Must(template.ParseFS(assetFS, "assets/*.html"))

// DefaultNoVNCDir is where `make novnc` installs the noVNC package
// (npm install --prefix web/assets/vendor @novnc/novnc), relative to the
// directory deskfarm runs in. $DESKFARM_NOVNC_DIR overrides it.
const DefaultNoVNCDir = "web/assets/vendor/node_modules/@novnc/novnc"

// noVNCDir resolves Options.NoVNCDir.
func noVNCDir(opt string) string {
	switch {
	case opt != "":
		return opt
	case os.Getenv("DESKFARM_NOVNC_DIR") != "":
		return os.Getenv("DESKFARM_NOVNC_DIR")
	}
	return DefaultNoVNCDir
}

// assetsHandler serves the embedded scripts and styles.
func (s *server) assets(w http.ResponseWriter, r *http.Request) error {
	sub, err := fs.Sub(assetFS, "assets")
	if err != nil {
		return fmt.Errorf("open embedded assets: %w", err)
	}
	w.Header().Set("Cache-Control", "no-cache")
	http.StripPrefix("/assets/", http.FileServerFS(sub)).ServeHTTP(w, r)
	return nil
}

// noVNC serves the noVNC package from disk.
func (s *server) noVNC(w http.ResponseWriter, r *http.Request) error {
	if _, err := os.Stat(filepath.Join(s.novnc, "core", "rfb.js")); err != nil {
		return &httpError{status: http.StatusNotFound, code: CodeNotFound,
			msg: fmt.Sprintf("noVNC is not installed in %s (run `make novnc` in the source tree, or set DESKFARM_NOVNC_DIR): %v", s.novnc, err)}
	}
	http.StripPrefix("/novnc/", http.FileServer(http.Dir(s.novnc))).ServeHTTP(w, r)
	return nil
}

// dashboard serves GET /: the page draws the farm from its live feed
// (GET /v1/live, live.go), so it carries no data of its own.
func (s *server) dashboard(w http.ResponseWriter, r *http.Request) error {
	return s.page(w, "dashboard.html", nil)
}

func (s *server) wall(w http.ResponseWriter, r *http.Request) error {
	vms, err := s.farm.List(r.Context())
	if err != nil {
		return err
	}
	sort.Slice(vms, func(i, j int) bool { return vms[i].CreatedAt.Before(vms[j].CreatedAt) })
	var live []vmm.VM
	for _, vm := range vms {
		if vm.State == vmm.StateReady {
			live = append(live, vm)
		}
	}
	return s.page(w, "wall.html", map[string]any{"VMs": live})
}

func (s *server) liveView(w http.ResponseWriter, r *http.Request) error {
	vm, err := s.farm.Get(r.Context(), vmID(r))
	if err != nil {
		return err
	}
	return s.page(w, "vm.html", map[string]any{"VM": vm, "Uptime": since(vm.CreatedAt), "API": "/v1/vms/" + vm.ID})
}

// episodeView serves GET /episodes/{id}: the live view of the episode's
// VM, whose stream, activity, control and takeover go through the
// episode's routes, so that on a cluster any agent serves the page and
// its connections (proxied to the owner, cluster.go).
func (s *server) episodeView(w http.ResponseWriter, r *http.Request) error {
	if s.pools == nil {
		return s.noPools()
	}
	ep, err := s.pools.Get(r.PathValue("id"))
	if err != nil {
		return err
	}
	if ep.State == pool.EpisodeEnded {
		return fmt.Errorf("episode %s: %w", ep.ID, pool.ErrEpisodeEnded)
	}
	noteVM(r, ep.VM)
	vm, err := s.farm.Get(r.Context(), ep.VM)
	if err != nil {
		return err
	}
	return s.page(w, "vm.html", map[string]any{"VM": vm, "Uptime": since(vm.CreatedAt),
		"API": "/v1/episodes/" + url.PathEscape(ep.ID)})
}

// trajectoriesView serves GET /trajectories: the recorded trajectories,
// drawn by the page from GET /v1/trajectories (?vm= or ?episode= keeps one
// VM's or episode's).
func (s *server) trajectoriesView(w http.ResponseWriter, r *http.Request) error {
	return s.page(w, "trajectories.html", nil)
}

// trajectoryView serves GET /trajectories/{id}: one trajectory's video,
// steps, screenshots and calls, drawn by the page from GET
// /v1/trajectories/{id} and its files; an unknown id is that route's 404,
// shown on the page.
func (s *server) trajectoryView(w http.ResponseWriter, r *http.Request) error {
	return s.page(w, "trajectory.html", map[string]any{"ID": r.PathValue("id")})
}

func (s *server) page(w http.ResponseWriter, name string, data any) error {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := pages.ExecuteTemplate(w, name, data); err != nil {
		return fmt.Errorf("render page %s: %w", name, err)
	}
	return nil
}

// since formats the time since t for people: "3m12s".
func since(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return time.Since(t).Round(time.Second).String()
}

// describe is a one-line summary of an event.
func describe(ev ActivityEvent) string {
	s := ev.Kind
	if ev.X != nil && ev.Y != nil {
		s += fmt.Sprintf(" (%d, %d)", *ev.X, *ev.Y)
	}
	if len(ev.Keys) > 0 {
		s += fmt.Sprintf(" %v", ev.Keys)
	}
	if ev.Text != "" {
		s += " " + strconv.Quote(ev.Text)
	}
	return s
}

// activityStream serves GET /v1/vms/{id}/activity as server-sent events:
// the kept events (after ?after=N or Last-Event-ID), then each new one,
// until the client goes or the VM's desk closes (a last "closed" event says
// why).
func (s *server) activityStream(w http.ResponseWriter, r *http.Request, t target) error {
	if s.desks == nil {
		return s.noDisplay()
	}
	id := t.vm
	var after uint64
	a := r.URL.Query().Get("after")
	if a == "" {
		a = r.Header.Get("Last-Event-ID")
	}
	if a != "" {
		n, err := strconv.ParseUint(a, 10, 64)
		if err != nil {
			return invalidf("after", "%q is not an event number", a)
		}
		after = n
	}
	d, err := s.desks.Get(r.Context(), id)
	if err != nil {
		return err
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return fmt.Errorf("activity of vm %s: flush: %w", id, err)
	}
	keepAlive := time.NewTicker(15 * time.Second)
	defer keepAlive.Stop()
	for {
		evs, changed := d.Activity(after)
		for _, ev := range evs {
			b, err := json.Marshal(activityEvent(ev))
			if err != nil {
				return fmt.Errorf("activity of vm %s: encode event: %w", id, err)
			}
			if _, err := fmt.Fprintf(w, "id: %d\ndata: %s\n\n", ev.Seq, b); err != nil {
				return nil // the viewer went away
			}
			after = ev.Seq
		}
		if err := rc.Flush(); err != nil {
			return nil
		}
		select {
		case <-d.Done():
			b, _ := json.Marshal(map[string]string{"reason": d.Err().Error()})
			fmt.Fprintf(w, "event: closed\ndata: %s\n\n", b) //nolint:errcheck // the last word, best effort
			rc.Flush()                                       //nolint:errcheck
			return nil
		default:
		}
		select {
		case <-changed:
		case <-d.Done():
		case <-keepAlive.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return nil
			}
		case <-t.ctx.Done(): // the client went, or the episode ended
			return nil
		}
	}
}
