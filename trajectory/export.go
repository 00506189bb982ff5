package trajectory

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/internal/fielderr"
)

// osworldTime is OSWorld's action_timestamp, "%Y%m%d@%H%M%S"
// (lib_run_single.py).
const osworldTime = "20060102@150405"

// Export writes the trajectory as a tar or a zip (api.ExportTar,
// api.ExportZip) to w: OSWorld's layout at the root, deskfarm's files
// under deskfarm/. A trajectory still recording is exported as it is.
func (m *Manager) Export(ctx context.Context, id, format string, w io.Writer) error {
	var a archive
	switch format {
	case api.ExportTar:
		a = &tarArchive{w: tar.NewWriter(w)}
	case api.ExportZip:
		a = &zipArchive{w: zip.NewWriter(w)}
	default:
		e := fielderr.Newf("format", ErrInvalid, "export format %q: want %s or %s", format, api.ExportTar, api.ExportZip)
		e.Accepted = []string{api.ExportTar, api.ExportZip}
		return e
	}
	info, err := m.info(id)
	if err != nil {
		return err
	}
	dir := m.dataDir(id)
	steps, stepBytes, err := readSteps(dir)
	if err != nil {
		return fmt.Errorf("trajectory %s: %w", id, err)
	}
	if err := m.export(ctx, a, info, dir, steps, stepBytes); err != nil {
		return fmt.Errorf("export trajectory %s: %w", id, err)
	}
	return a.Close()
}

func (m *Manager) export(ctx context.Context, a archive, info api.TrajectoryInfo, dir string, steps []api.TrajectoryStep, stepBytes []byte) error {
	mod := info.StartedAt
	if info.EndedAt != nil {
		mod = *info.EndedAt
	}
	// OSWorld's layout.
	var traj bytes.Buffer
	shots := map[string]string{} // root name -> stored name
	var order []string
	for i, s := range steps {
		line := osworldLine(s, i == len(steps)-1)
		if s.Screenshots.After != "" {
			line.ScreenshotFile = fmt.Sprintf("step_%d_%s%s", s.Step, s.Time.Format(osworldTime), path.Ext(s.Screenshots.After))
			shots[line.ScreenshotFile] = s.Screenshots.After
			order = append(order, line.ScreenshotFile)
		}
		b, err := json.Marshal(line)
		if err != nil {
			return fmt.Errorf("step %d: %w", s.Step, err)
		}
		traj.Write(append(b, '\n'))
	}
	if err := a.add("traj.jsonl", mod, bytes.NewReader(traj.Bytes()), int64(traj.Len())); err != nil {
		return err
	}
	for _, name := range order {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := addFile(a, name, filepath.Join(dir, filepath.FromSlash(shots[name]))); err != nil {
			return err
		}
	}
	if info.Video != "" {
		if err := addFile(a, videoFile, filepath.Join(dir, videoFile)); err != nil {
			return err
		}
	}
	if info.Result != nil {
		res := strconv.FormatFloat(*info.Result, 'f', -1, 64)
		if !strings.ContainsAny(res, ".eE") {
			res += ".0" // as OSWorld writes a float
		}
		if err := a.add("result.txt", mod, strings.NewReader(res+"\n"), int64(len(res)+1)); err != nil {
			return err
		}
	}
	// deskfarm's own files, with the info as it is now and the complete
	// steps (without a line still being written).
	ib, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return err
	}
	ib = append(ib, '\n')
	if err := a.add("deskfarm/"+infoFile, mod, bytes.NewReader(ib), int64(len(ib))); err != nil {
		return err
	}
	if err := a.add("deskfarm/"+stepsFile, mod, bytes.NewReader(stepBytes), int64(len(stepBytes))); err != nil {
		return err
	}
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() || rel == infoFile || rel == stepsFile || strings.HasSuffix(rel, ".tmp") {
			return nil
		}
		return addFile(a, "deskfarm/"+rel, p)
	})
}

// osworldLine is a step as OSWorld's traj.jsonl has it.
func osworldLine(s api.TrajectoryStep, last bool) api.OSWorldTrajLine {
	return api.OSWorldTrajLine{
		StepNum:         s.Step,
		ActionTimestamp: s.Time.Format(osworldTime),
		Action:          osworldAction(s),
		Response:        s.ModelResponse,
		Done:            last,
		Info: map[string]any{
			"actor": s.Actor, "kind": s.Kind, "tool": s.Tool, "is_error": s.IsError, "deskfarm_step": s.Step,
		},
	}
}

// osworldAction is what OSWorld's "action" holds: the agent's call (the
// input of a tool call, the code of a pyautogui one, a neutral list) or a
// person's neutral actions.
func osworldAction(s api.TrajectoryStep) any {
	if s.Kind == api.KindActions {
		var req struct {
			Tool    string          `json:"tool"`
			Input   json.RawMessage `json:"input"`
			Action  json.RawMessage `json:"action"`
			Actions json.RawMessage `json:"actions"`
		}
		if json.Unmarshal(s.Request, &req) == nil {
			switch {
			case len(req.Input) > 0 && req.Tool == api.ToolPyautogui:
				var code string
				if json.Unmarshal(req.Input, &code) == nil {
					return code
				}
				var c struct {
					Command string `json:"command"`
				}
				if json.Unmarshal(req.Input, &c) == nil && c.Command != "" {
					return c.Command
				}
				return req.Input
			case len(req.Input) > 0:
				return req.Input
			case len(req.Actions) > 0:
				return req.Actions
			case len(req.Action) > 0:
				return req.Action
			}
		}
	}
	if s.Actor == api.ActorPerson || len(s.Request) == 0 {
		if len(s.Actions) == 0 {
			return nil
		}
		return s.Actions
	}
	return s.Request
}

// archive is a tar or a zip being written.
type archive interface {
	add(name string, mod time.Time, r io.Reader, size int64) error
	Close() error
}

// addFile adds the file at p, as long as it was when opened (a video
// still recording grows).
func addFile(a archive, name, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	return a.add(name, fi.ModTime(), io.LimitReader(f, fi.Size()), fi.Size())
}

type tarArchive struct{ w *tar.Writer }

func (t *tarArchive) add(name string, mod time.Time, r io.Reader, size int64) error {
	if err := t.w.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: size, ModTime: mod, Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
		return err
	}
	if _, err := io.Copy(t.w, r); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

func (t *tarArchive) Close() error { return t.w.Close() }

type zipArchive struct{ w *zip.Writer }

func (z *zipArchive) add(name string, mod time.Time, r io.Reader, _ int64) error {
	method := zip.Deflate
	switch path.Ext(name) {
	case ".png", ".jpg", ".mp4":
		method = zip.Store // compressed already
	}
	w, err := z.w.CreateHeader(&zip.FileHeader{Name: name, Method: method, Modified: mod})
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, r); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

func (z *zipArchive) Close() error { return z.w.Close() }
