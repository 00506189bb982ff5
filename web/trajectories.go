package web

// Trajectories (issue 16): recording a VM or an episode, and the recorded
// trajectories, which outlive their episodes under the state dir (package
// trajectory). A trajectory's id is its episode's. Each step of a recorded
// VM is noted by record.go.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strings"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/pool"
	"github.com/deskfarm/deskfarm/trajectory"
)

func (s *server) noTrajectories() error {
	return &httpError{status: http.StatusNotImplemented, code: api.CodeNoTrajectories,
		msg: "this server keeps no trajectories"}
}

// trajectoryURL is a trajectory's page, at the host the caller reached.
func trajectoryURL(r *http.Request, id string) string {
	scheme, host := callerBase(r)
	return fmt.Sprintf("%s://%s/trajectories/%s", scheme, host, url.PathEscape(id))
}

// withURL is info with its page.
func withURL(r *http.Request, info api.TrajectoryInfo) api.TrajectoryInfo {
	info.URL = trajectoryURL(r, info.ID)
	return info
}

// startRecording serves POST /v1/vms/{id}/recording (and an episode's):
// the VM's steps, screenshots and video from now on, until DELETE, the
// episode's end or the VM's. Through an episode the trajectory's id is the
// episode's, and it ends with the episode.
func (s *server) startRecording(w http.ResponseWriter, r *http.Request, t target) error {
	if s.traj == nil {
		return s.noTrajectories()
	}
	var body api.StartRecordingRequest
	if r.ContentLength != 0 {
		if err := decodeJSON(w, r, &body, maxJSONBody); err != nil {
			return err
		}
	}
	meta := trajectory.Meta{ID: t.episode, Episode: t.episode, VM: t.vm, ScreenshotSize: t.screenshotSize,
		Options: body.RecordOptions}
	vm, err := s.farm.Get(t.ctx, t.vm)
	if err != nil {
		return err
	}
	meta.Image = vm.Image
	if t.episode != "" && s.pools != nil {
		if ep, err := s.pools.Get(t.episode); err == nil {
			meta.Pool = ep.Pool
		}
	}
	info, err := s.record(t.ctx, meta)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/trajectories/"+url.PathEscape(info.ID))
	writeJSON(w, http.StatusCreated, withURL(r, info))
	return nil
}

// record starts a recording (ctx bounds the start only; the recording
// outlives the request).
func (s *server) record(ctx context.Context, meta trajectory.Meta) (api.TrajectoryInfo, error) {
	info, err := s.traj.Start(ctx, meta)
	if err != nil {
		return info, fmt.Errorf("record vm %s: %w", meta.VM, err)
	}
	return info, nil
}

// stopRecording serves DELETE /v1/vms/{id}/recording: the recording ends,
// its trajectory stays.
func (s *server) stopRecording(w http.ResponseWriter, r *http.Request, t target) error {
	if s.traj == nil {
		return s.noTrajectories()
	}
	info, err := s.traj.Stop(t.ctx, t.vm, "stopped")
	if err != nil {
		return fmt.Errorf("stop recording vm %s: %w", t.vm, err)
	}
	writeJSON(w, http.StatusOK, withURL(r, info))
	return nil
}

func (s *server) listTrajectories(w http.ResponseWriter, r *http.Request) error {
	if s.traj == nil {
		return s.noTrajectories()
	}
	out := s.traj.List()
	if out.Trajectories == nil {
		out.Trajectories = []api.TrajectoryInfo{}
	}
	for i, info := range out.Trajectories {
		out.Trajectories[i] = withURL(r, info)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *server) getTrajectory(w http.ResponseWriter, r *http.Request) error {
	if s.traj == nil {
		return s.noTrajectories()
	}
	id := r.PathValue("id")
	tr, err := s.traj.Get(id)
	if err != nil {
		return err
	}
	tr.TrajectoryInfo = withURL(r, tr.TrajectoryInfo)
	if tr.StepList == nil {
		tr.StepList = []api.TrajectoryStep{}
	}
	// The steps' requests and answers as recorded: no HTML escaping.
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(tr) //nolint:errcheck // the client went away; nothing to tell it
	return nil
}

// Media types of a trajectory's files, by extension. Anything else (the
// guest's own files, kept with keep_files) is sent as an attachment of
// bytes: a guest's HTML must never run as a page of the farm.
var trajectoryMedia = map[string]string{
	".png":   "image/png",
	".jpg":   "image/jpeg",
	".mp4":   "video/mp4",
	".json":  "application/json",
	".jsonl": "application/jsonl",
	".xml":   "text/plain; charset=utf-8", // an accessibility tree, shown as text
	".txt":   "text/plain; charset=utf-8",
}

// trajectoryFile serves GET /v1/trajectories/{id}/files/{name...}: one of
// its files by its name under deskfarm/ (a step's screenshot,
// recording.mp4, with ranges so the video seeks). The guest's files a
// recording kept (files/...) are what was inside the VM: their requests
// need control (keptFileRequest).
func (s *server) trajectoryFile(w http.ResponseWriter, r *http.Request) error {
	if s.traj == nil {
		return s.noTrajectories()
	}
	name := r.PathValue("name")
	id := r.PathValue("id")
	f, mod, err := s.traj.Open(id, name)
	if err != nil {
		return err
	}
	defer f.Close()
	h := w.Header()
	if mt, ok := trajectoryMedia[path.Ext(name)]; ok && !keptName(name) {
		h.Set("Content-Type", mt)
	} else {
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Content-Disposition", "attachment")
	}
	// A trajectory still recording grows: a client always asks again.
	h.Set("Cache-Control", "no-cache")
	http.ServeContent(w, r, path.Base(name), mod, f)
	return nil
}

// keptFileRequest reports whether r asks for a kept guest file of a
// trajectory: its {name...}, read from the escaped path as the mux does,
// names one under files/.
func keptFileRequest(r *http.Request) bool {
	segs := strings.Split(r.URL.EscapedPath(), "/")
	// "", "v1", "trajectories", id, "files", name...
	if len(segs) < 6 || segs[1] != "v1" || segs[2] != "trajectories" || segs[4] != "files" {
		return false
	}
	for i, seg := range segs[5:] {
		u, err := url.PathUnescape(seg)
		if err != nil {
			return true // the mux refuses it; never let it through as watch
		}
		segs[5+i] = u
	}
	return keptName(strings.Join(segs[5:], "/"))
}

// keptName reports whether a trajectory's file name is a kept guest file.
func keptName(name string) bool {
	name = strings.TrimPrefix(path.Clean("/"+name), "/")
	return name == "files" || strings.HasPrefix(name, "files/")
}

// exportFormat reads ?format=, tar by default.
func exportFormat(r *http.Request) (string, error) {
	switch f := r.URL.Query().Get("format"); f {
	case "", api.ExportTar:
		return api.ExportTar, nil
	case api.ExportZip:
		return f, nil
	default:
		return "", invalidf("format", "%q: accepted values are %s and %s", f, api.ExportTar, api.ExportZip)
	}
}

// exportTrajectory serves GET /v1/trajectories/{id}/export?format=tar|zip:
// OSWorld's result layout with deskfarm's own record under deskfarm/.
func (s *server) exportTrajectory(w http.ResponseWriter, r *http.Request) error {
	return s.export(w, r, r.PathValue("id"))
}

// episodeTrajectory serves GET /v1/episodes/{id}/trajectory?format=: the
// export of the episode's trajectory, during the episode or after it.
func (s *server) episodeTrajectory(w http.ResponseWriter, r *http.Request) error {
	return s.export(w, r, r.PathValue("id"))
}

func (s *server) export(w http.ResponseWriter, r *http.Request, id string) error {
	if s.traj == nil {
		return s.noTrajectories()
	}
	format, err := exportFormat(r)
	if err != nil {
		return err
	}
	mt := "application/x-tar"
	if format == api.ExportZip {
		mt = "application/zip"
	}
	lw := &lazyWriter{w: w, start: func(h http.Header) {
		h.Set("Content-Type", mt)
		h.Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", fileName(id)+"."+format))
	}}
	err = s.traj.Export(r.Context(), id, format, lw)
	if err == nil {
		lw.Write(nil) //nolint:errcheck // an empty export still answers 200
		return nil
	}
	if !lw.started {
		return err
	}
	// Half an archive must not read as a whole one: cut the stream.
	s.log.Warn("trajectory export failed midway", "episode", id, "op", "trajectory_export", "err", err)
	panic(http.ErrAbortHandler)
}

// fileName keeps the characters of id a file name may hold everywhere.
func fileName(id string) string {
	return strings.Map(func(c rune) rune {
		if c == '-' || c == '_' || c == '.' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
			return c
		}
		return '_'
	}, id)
}

// lazyWriter sends the headers of a stream on its first write, so that an
// error before any byte is still answered as an error.
type lazyWriter struct {
	w       http.ResponseWriter
	start   func(http.Header)
	started bool
}

func (l *lazyWriter) Write(p []byte) (int, error) {
	if !l.started {
		l.started = true
		l.start(l.w.Header())
		l.w.WriteHeader(http.StatusOK)
	}
	if len(p) == 0 {
		return 0, nil
	}
	return l.w.Write(p)
}

var _ io.Writer = (*lazyWriter)(nil)

// setTrajectoryResult serves PUT /v1/trajectories/{id}/result: a client's
// score of the episode, OSWorld's result.txt in the export.
func (s *server) setTrajectoryResult(w http.ResponseWriter, r *http.Request) error {
	if s.traj == nil {
		return s.noTrajectories()
	}
	var body api.TrajectoryResultRequest
	if err := decodeJSON(w, r, &body, maxJSONBody); err != nil {
		return err
	}
	id := r.PathValue("id")
	if err := s.traj.SetResult(id, body.Result); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// deleteTrajectory serves DELETE /v1/trajectories/{id}: a finished
// trajectory's files go; one still recording is refused.
func (s *server) deleteTrajectory(w http.ResponseWriter, r *http.Request) error {
	if s.traj == nil {
		return s.noTrajectories()
	}
	id := r.PathValue("id")
	if err := s.traj.Delete(id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// recordEpisode starts the recording of a new episode when its start or
// its pool asks for one, with start (nil: on this host's manager). A
// recording that cannot start never fails the episode: it is logged, and
// the episode answers recording false.
func (s *server) recordEpisode(ctx context.Context, body api.StartEpisodeRequest, ep pool.Episode,
	start func(context.Context, trajectory.Meta) error) {
	pc, _ := s.poolConfig(ep.Pool)
	on, opts := pc.Record, apiRecordOptions(pc.RecordOptions)
	if body.Record != nil {
		on = *body.Record
	}
	if body.RecordOptions != nil {
		opts = *body.RecordOptions
	}
	if !on || s.traj == nil {
		return
	}
	if start == nil {
		start = func(ctx context.Context, meta trajectory.Meta) error {
			_, err := s.record(ctx, meta)
			return err
		}
	}
	err := start(ctx, trajectory.Meta{ID: ep.ID, Episode: ep.ID, VM: ep.VM, Pool: ep.Pool, Image: pc.Image,
		ScreenshotSize: ep.ScreenshotSize, Options: opts})
	if err != nil {
		s.log.Warn("episode not recorded", "vm", ep.VM, "episode", ep.ID, "op", "trajectory", "err", err)
	}
}

// poolConfig is the named pool's config.
func (s *server) poolConfig(name string) (pool.PoolConfig, bool) {
	for _, p := range s.pools.Config().Pools {
		if p.Name == name {
			return p, true
		}
	}
	return pool.PoolConfig{}, false
}

// endRecording ends the recording of an episode that ends, before its VM
// is reset (the trajectory's last picture is the episode's).
func (s *server) endRecording(ctx context.Context, ep pool.Episode) {
	if s.traj == nil {
		return
	}
	if rec := s.traj.Recorder(ep.VM); rec == nil || rec.ID() != ep.ID {
		return
	}
	if _, err := s.traj.Stop(ctx, ep.VM, "episode ended"); err != nil && !errors.Is(err, trajectory.ErrNotRecording) {
		s.log.Warn("end the episode's recording", "vm", ep.VM, "episode", ep.ID, "op", "trajectory", "err", err)
	}
}

// episodeRecording says whether ep is being recorded and where its
// trajectory's page is (also after it ended); has is the ids of the
// trajectories kept, nil to ask the store.
func (s *server) episodeRecording(r *http.Request, ep pool.Episode, has map[string]bool) (recording bool, page string) {
	if s.traj == nil {
		return false, ""
	}
	if rec := s.traj.Recorder(ep.VM); rec != nil && rec.ID() == ep.ID && ep.State != pool.EpisodeEnded {
		return true, trajectoryURL(r, ep.ID)
	}
	if has == nil {
		f, _, err := s.traj.Open(ep.ID, "info.json")
		if err != nil {
			return false, ""
		}
		f.Close()
	} else if !has[ep.ID] {
		return false, ""
	}
	return false, trajectoryURL(r, ep.ID)
}

// trajectoryIDs are the ids of the trajectories kept.
func (s *server) trajectoryIDs() map[string]bool {
	out := map[string]bool{}
	if s.traj == nil {
		return out
	}
	for _, info := range s.traj.List().Trajectories {
		out[info.ID] = true
	}
	return out
}
