package trajectory

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/internal/fielderr"
)

// The store: one directory per trajectory, <Dir>/<id>/deskfarm/, holding
//
//	info.json          api.TrajectoryInfo, rewritten atomically (tmp+rename)
//	trajectory.jsonl   one api.TrajectoryStep per line, appended
//	screens/*.png      pictures at the agent's size (After: the agent's bytes)
//	native/*.png       pictures at native size, when that differs
//	a11y/*.xml         accessibility trees, with RecordOptions.A11y
//	files/*            file contents, with RecordOptions.KeepFiles
//	recording.mp4      the video (package video)
//
// The deskfarm/ level is what an export puts under deskfarm/ beside
// OSWorld's files, so a directory written from an export has the same
// shape.
const (
	infoFile  = "info.json"
	stepsFile = "trajectory.jsonl"
	videoFile = "recording.mp4"
)

// dataDir is a trajectory's deskfarm/ directory.
func (m *Manager) dataDir(id string) string {
	return filepath.Join(m.cfg.Dir, id, "deskfarm")
}

// writeInfo writes info.json atomically, so a crash leaves the old or the
// new one, never half of one.
func writeInfo(dir string, info api.TrajectoryInfo) error {
	b, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", infoFile, err)
	}
	b = append(b, '\n')
	tmp := filepath.Join(dir, infoFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		os.Remove(tmp)
		if errors.Is(err, syscall.ENOSPC) {
			// A full disk has no block for a second copy, but truncating
			// the old one frees the block the new one needs: not atomic,
			// and better than an info.json that still says recording.
			if err := os.WriteFile(filepath.Join(dir, infoFile), b, 0o644); err == nil {
				return nil
			}
		}
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, infoFile)); err != nil {
		return fmt.Errorf("rename %s: %w", tmp, err)
	}
	return nil
}

func readInfo(dir string) (api.TrajectoryInfo, error) {
	var info api.TrajectoryInfo
	b, err := os.ReadFile(filepath.Join(dir, infoFile))
	if err != nil {
		return info, err
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return info, fmt.Errorf("read %s: %w", filepath.Join(dir, infoFile), err)
	}
	return info, nil
}

// readSteps reads trajectory.jsonl. A last line without its newline is a
// step still being written (or cut by a crash) and is left out, as is a
// line that does not parse.
func readSteps(dir string) ([]api.TrajectoryStep, []byte, error) {
	b, err := os.ReadFile(filepath.Join(dir, stepsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	if i := bytes.LastIndexByte(b, '\n'); i < len(b)-1 {
		b = b[:i+1]
	}
	var steps []api.TrajectoryStep
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var s api.TrajectoryStep
		if json.Unmarshal(sc.Bytes(), &s) == nil {
			steps = append(steps, s)
		}
	}
	return steps, b, sc.Err()
}

// dirSize is the bytes of the files under dir and the latest modification
// time among them.
func dirSize(dir string) (int64, time.Time) {
	var n int64
	var last time.Time
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			n += fi.Size()
			if fi.ModTime().After(last) {
				last = fi.ModTime()
			}
		}
		return nil
	})
	return n, last
}

// load reads the store at New: every trajectory's info, finishing as
// interrupted those a previous run left recording (it died or was killed
// before it could end them).
func (m *Manager) load() error {
	if err := os.MkdirAll(m.cfg.Dir, 0o755); err != nil {
		return fmt.Errorf("trajectory store: %w", err)
	}
	ents, err := os.ReadDir(m.cfg.Dir)
	if err != nil {
		return fmt.Errorf("trajectory store: %w", err)
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		dir := m.dataDir(e.Name())
		info, err := readInfo(dir)
		if err != nil {
			m.log.Warn("trajectory unreadable, left alone", "op", "trajectory", "dir", dir, "err", err)
			continue
		}
		info.Bytes, _ = dirSize(dir)
		if info.State == api.TrajectoryRecording {
			steps, _, _ := readSteps(dir)
			_, last := dirSize(dir)
			if last.IsZero() {
				last = m.now()
			}
			info.State = api.TrajectoryInterrupted
			info.EndedAt = &last
			info.EndReason = "server stopped"
			info.Steps = len(steps)
			if err := writeInfo(dir, info); err != nil {
				m.log.Warn("trajectory: cannot mark interrupted", "op", "trajectory", "episode", info.Episode, "vm", info.VM, "err", err)
			}
			m.log.Info("trajectory interrupted by a restart", "op", "trajectory", "episode", info.Episode, "vm", info.VM, "id", info.ID, "steps", info.Steps)
		}
		m.done[info.ID] = info
		m.doneBytes += info.Bytes
	}
	return nil
}

// List lists the trajectories, newest first.
func (m *Manager) List() api.TrajectoryList {
	m.mu.Lock()
	out := api.TrajectoryList{BudgetBytes: m.cfg.BudgetBytes, Trajectories: []api.TrajectoryInfo{}}
	for _, info := range m.done {
		out.Trajectories = append(out.Trajectories, info)
	}
	recs := make([]*Recorder, 0, len(m.byVM))
	for _, r := range m.byVM {
		recs = append(recs, r)
	}
	m.mu.Unlock()
	for _, r := range recs {
		out.Trajectories = append(out.Trajectories, r.Info())
	}
	sortNewest(out.Trajectories)
	for _, t := range out.Trajectories {
		out.TotalBytes += t.Bytes
	}
	return out
}

// info returns a trajectory's info, live for one recording.
func (m *Manager) info(id string) (api.TrajectoryInfo, error) {
	m.mu.Lock()
	info, ok := m.done[id]
	var rec *Recorder
	for _, r := range m.byVM {
		if r.id == id {
			rec = r
		}
	}
	m.mu.Unlock()
	if rec != nil {
		return rec.Info(), nil
	}
	if !ok {
		return info, notFound(id)
	}
	return info, nil
}

func notFound(id string) error {
	return fmt.Errorf("trajectory %q: %w", id, ErrNotFound)
}

// Get returns a trajectory with its steps.
func (m *Manager) Get(id string) (api.Trajectory, error) {
	info, err := m.info(id)
	if err != nil {
		return api.Trajectory{}, err
	}
	steps, _, err := readSteps(m.dataDir(id))
	if err != nil {
		return api.Trajectory{}, fmt.Errorf("trajectory %s: %w", id, err)
	}
	if steps == nil {
		steps = []api.TrajectoryStep{}
	}
	return api.Trajectory{TrajectoryInfo: info, StepList: steps}, nil
}

// cleanName checks a file name relative to a trajectory's deskfarm/
// directory: relative, slash-separated, without "." or ".." elements.
func cleanName(name string) (string, error) {
	if name == "" || strings.HasPrefix(name, "/") || strings.Contains(name, "\\") || path.Clean(name) != name ||
		name == "." || name == ".." || strings.HasPrefix(name, "../") || strings.HasSuffix(name, ".tmp") {
		return "", fielderr.Newf("name", ErrInvalid, "file name %q: want a path inside the trajectory, such as screens/<hash>.png or recording.mp4", name)
	}
	return name, nil
}

// Open opens one of a trajectory's files by its name relative to its
// deskfarm/ directory (a screenshot, recording.mp4); names outside it
// are ErrInvalid.
func (m *Manager) Open(id, name string) (io.ReadSeekCloser, time.Time, error) {
	if _, err := m.info(id); err != nil {
		return nil, time.Time{}, err
	}
	name, err := cleanName(name)
	if err != nil {
		return nil, time.Time{}, err
	}
	f, err := os.Open(filepath.Join(m.dataDir(id), filepath.FromSlash(name)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, time.Time{}, fmt.Errorf("trajectory %s: file %q: %w", id, name, ErrNotFound)
	}
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("trajectory %s: %w", id, err)
	}
	fi, err := f.Stat()
	if err != nil || fi.IsDir() {
		f.Close()
		return nil, time.Time{}, fmt.Errorf("trajectory %s: file %q: %w", id, name, ErrNotFound)
	}
	return f, fi.ModTime(), nil
}

// SetResult records a client's score (result.txt).
func (m *Manager) SetResult(id string, result float64) error {
	m.mu.Lock()
	for _, r := range m.byVM {
		if r.id == id {
			m.mu.Unlock()
			r.mu.Lock()
			r.info.Result = &result
			r.mu.Unlock()
			return nil
		}
	}
	defer m.mu.Unlock()
	info, ok := m.done[id]
	if !ok {
		return notFound(id)
	}
	info.Result = &result
	if err := writeInfo(m.dataDir(id), info); err != nil {
		return fmt.Errorf("trajectory %s: %w", id, err)
	}
	m.done[id] = info
	return nil
}

// Delete removes a finished trajectory.
func (m *Manager) Delete(id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.byVM {
		if r.id == id {
			return fmt.Errorf("trajectory %s of VM %s: %w", id, r.meta.VM, ErrRecording)
		}
	}
	if _, ok := m.done[id]; !ok {
		return notFound(id)
	}
	return m.removeLocked(id, "deleted")
}

// removeLocked removes a finished trajectory's directory; m.mu held.
func (m *Manager) removeLocked(id, why string) error {
	info := m.done[id]
	if err := os.RemoveAll(filepath.Join(m.cfg.Dir, id)); err != nil {
		return fmt.Errorf("remove trajectory %s: %w", id, err)
	}
	delete(m.done, id)
	m.doneBytes -= info.Bytes
	m.log.Info("trajectory removed", "op", "trajectory", "id", id, "episode", info.Episode, "vm", info.VM, "why", why, "bytes", info.Bytes)
	return nil
}
