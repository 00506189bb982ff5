package cli

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/api"
)

// tarOf builds a tar stream of entries, in order.
func tarOf(t *testing.T, entries ...*tar.Header) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range entries {
		body := []byte(h.Linkname)
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(h.Name)) // the body is the name, to check what landed where
			body = []byte(h.Name)
			h.Linkname = ""
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write(body)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// exportServer answers the export routes with archive (and records the
// paths asked); other paths are 404 not_found.
func exportServer(t *testing.T, archive []byte, asked *[]string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		*asked = append(*asked, r.URL.Path+"?"+r.URL.RawQuery)
		if r.URL.Path == "/v1/trajectories/ep-0123456789ab/export" && r.URL.Query().Get("format") == "tar" {
			w.Header().Set("Content-Type", "application/x-tar")
			w.Write(archive)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		json.NewEncoder(w).Encode(api.ErrorResponse{Error: api.ErrorBody{Code: "not_found", Message: "no trajectory " + r.URL.Path}})
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestCLIEpisodeExport(t *testing.T) {
	archive := tarOf(t,
		&tar.Header{Name: "traj.jsonl", Typeflag: tar.TypeReg},
		&tar.Header{Name: "step_1_20261201@161200.png", Typeflag: tar.TypeReg},
		&tar.Header{Name: "deskfarm/", Typeflag: tar.TypeDir, Mode: 0o755},
		&tar.Header{Name: "deskfarm/screens/ab12.png", Typeflag: tar.TypeReg}, // its directory has no entry of its own
		&tar.Header{Name: "deskfarm/trajectory.jsonl", Typeflag: tar.TypeReg},
	)
	var asked []string
	srv := exportServer(t, archive, &asked)
	c := &cli{t: t, env: map[string]string{"DESKFARM_SERVER": srv.URL, "DESKFARM_TOKEN_FILE": filepath.Join(t.TempDir(), "no-token")}}
	dir := filepath.Join(t.TempDir(), "out", "ep1") // made, parents too
	res := c.mustRun(nil, "episode", "export", "ep-0123456789ab", dir)
	if res.stdout != "ep-0123456789ab\t4 files\t"+dir+"\n" {
		t.Errorf("export printed %q", res.stdout)
	}
	for _, name := range []string{"traj.jsonl", "step_1_20261201@161200.png", "deskfarm/screens/ab12.png", "deskfarm/trajectory.jsonl"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(b) != name {
			t.Errorf("%s holds %q (%v), want its archive body", name, b, err)
		}
	}
	if len(asked) != 1 {
		t.Errorf("asked %v, want only the trajectory's export", asked)
	}

	// An unknown id: the server's error, naming it, after the episode's
	// route was tried too.
	asked = nil
	res = c.run(nil, "episode", "export", "ep-nope", dir)
	if res.err == nil || !strings.Contains(res.err.Error(), "export ep-nope") || !strings.Contains(res.err.Error(), "not_found") {
		t.Errorf("export of an unknown id: %v", res.err)
	}
	if len(asked) != 2 || !strings.HasPrefix(asked[1], "/v1/episodes/ep-nope/trajectory?format=tar") {
		t.Errorf("asked %v, want the trajectory's then the episode's route", asked)
	}
}

// An archive is the server's; it may not write outside DIR, nor make
// links or devices in it.
func TestCLIEpisodeExportRefusesEscapes(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    *tar.Header
		want string
	}{
		{"dotdot", &tar.Header{Name: "../escaped.txt", Typeflag: tar.TypeReg}, "leaves"},
		{"nested dotdot", &tar.Header{Name: "deskfarm/../../escaped.txt", Typeflag: tar.TypeReg}, "leaves"},
		{"absolute", &tar.Header{Name: "/tmp/escaped.txt", Typeflag: tar.TypeReg}, "leaves"},
		{"symlink", &tar.Header{Name: "link", Typeflag: tar.TypeSymlink, Linkname: "/etc"}, "not a regular file"},
		{"hard link", &tar.Header{Name: "hard", Typeflag: tar.TypeLink, Linkname: "traj.jsonl"}, "not a regular file"},
		{"fifo", &tar.Header{Name: "fifo", Typeflag: tar.TypeFifo}, "not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			archive := tarOf(t, &tar.Header{Name: "traj.jsonl", Typeflag: tar.TypeReg}, tc.h,
				&tar.Header{Name: "after.txt", Typeflag: tar.TypeReg})
			var asked []string
			srv := exportServer(t, archive, &asked)
			c := &cli{t: t, env: map[string]string{"DESKFARM_SERVER": srv.URL, "DESKFARM_TOKEN_FILE": filepath.Join(t.TempDir(), "no-token")}}
			parent := t.TempDir()
			dir := filepath.Join(parent, "out")
			res := c.run(nil, "episode", "export", "ep-0123456789ab", dir)
			if res.err == nil || !strings.Contains(res.err.Error(), "refused") || !strings.Contains(res.err.Error(), tc.want) {
				t.Fatalf("export: %v; want a refusal (%s)", res.err, tc.want)
			}
			if _, err := os.Lstat(filepath.Join(parent, "escaped.txt")); err == nil {
				t.Error("the entry was written outside DIR")
			}
			if _, err := os.Lstat(filepath.Join(dir, tc.h.Name)); err == nil && tc.h.Typeflag != tar.TypeReg {
				t.Errorf("%s was made in DIR", tc.h.Name)
			}
			if _, err := os.Stat(filepath.Join(dir, "after.txt")); err == nil {
				t.Error("the export went on after a refused entry")
			}
		})
	}
}

func TestCLITrajectories(t *testing.T) {
	ended := time.Now().Add(-time.Minute)
	list := api.TrajectoryList{TotalBytes: 5 << 20, BudgetBytes: 20 << 30, Trajectories: []api.TrajectoryInfo{
		{ID: "ep-0123456789ab", Episode: "ep-0123456789ab", VM: "v01", Pool: "desktop", State: api.TrajectoryRecording,
			StartedAt: time.Now().Add(-30 * time.Second), Steps: 4, Bytes: 3 << 20, Video: "recording.mp4"},
		{ID: "tr-00112233aabb", VM: "v02", State: api.TrajectoryFinished, StartedAt: time.Now().Add(-3 * time.Hour),
			EndedAt: &ended, EndReason: "episode ended", Steps: 12, Bytes: 2 << 20, Video: "recording.mp4", VideoSeconds: 61.4},
	}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/trajectories" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(list)
	}))
	defer srv.Close()
	c := &cli{t: t, env: map[string]string{"DESKFARM_SERVER": srv.URL, "DESKFARM_TOKEN_FILE": filepath.Join(t.TempDir(), "no-token")}}
	res := c.mustRun(nil, "trajectories")
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "TRAJECTORY ") {
		t.Fatalf("trajectories printed %q", res.stdout)
	}
	for i, want := range [][]string{
		{"ep-0123456789ab", "v01", "desktop", "recording", " 4 ", "3.0 MiB", "30s"},
		{"tr-00112233aabb", "v02", " - ", "finished", "12", "2.0 MiB", "61s", "3h", "episode ended"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[1+i], w) {
				t.Errorf("row %q lacks %q", lines[1+i], w)
			}
		}
	}
	if !strings.Contains(lines[4], "total 5.0 MiB of 20.0 GiB") {
		t.Errorf("last line %q", lines[4])
	}
	if res = c.mustRun(nil, "trajectories", "-q"); res.stdout != "ep-0123456789ab\ntr-00112233aabb\n" {
		t.Errorf("-q printed %q", res.stdout)
	}
	res = c.mustRun(nil, "trajectories", "--json")
	var got api.TrajectoryList
	if err := json.Unmarshal([]byte(res.stdout), &got); err != nil || len(got.Trajectories) != 2 || got.BudgetBytes != 20<<30 {
		t.Errorf("--json printed %q (%v)", res.stdout, err)
	}
}
