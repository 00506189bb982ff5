package osworld

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/deskfarm/deskfarm/vmm"
)

// downloadRig runs /setup/download_file with the guest's python3 played by
// the host's: download.py really fetches from a local server.
func downloadRig(t *testing.T) (*Handler, *httptest.Server, *atomic.Int32) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 on the host")
	}
	var missing atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/data.bin", func(w http.ResponseWriter, r *http.Request) { w.Write(bytes.Repeat([]byte("0123456789"), 20000)) })
	mux.HandleFunc("/missing", func(w http.ResponseWriter, r *http.Request) {
		missing.Add(1)
		http.NotFound(w, r)
	})
	mux.HandleFunc("/short", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		w.Write([]byte("only part"))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	g := newFakeGuest()
	g.on("python3", func(c Cmd) (Result, error) {
		cmd := exec.Command("python3", c.Argv[1:]...)
		cmd.Stdin = bytes.NewReader(c.Stdin)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		res := Result{Stdout: out.Bytes(), Stderr: errOut.Bytes()}
		if ee, ok := errors.AsType[*exec.ExitError](err); ok {
			res.ExitCode = ee.ExitCode()
		} else if err != nil {
			return res, err
		}
		return res, nil
	})
	return NewHandler(g, Options{}), srv, &missing
}

func TestDownloadFile(t *testing.T) {
	h, srv, missing := downloadRig(t)
	dir := t.TempDir()

	dst := filepath.Join(dir, "deep", "data.bin")
	rec := postJSON(t, h, "/setup/download_file", `{"url": "`+srv.URL+`/data.bin", "path": "`+dst+`"}`)
	if rec.Code != 200 || rec.Body.String() != "File downloaded successfully: 200000 bytes" {
		t.Fatalf("download: %d %q", rec.Code, rec.Body)
	}
	if b, err := os.ReadFile(dst); err != nil || len(b) != 200000 {
		t.Fatalf("downloaded file: %d bytes, %v", len(b), err)
	}

	// A 404 is tried three times, then answered in requests' words.
	dst = filepath.Join(dir, "missing")
	rec = postJSON(t, h, "/setup/download_file", `{"url": "`+srv.URL+`/missing", "path": "`+dst+`"}`)
	want := "Failed to download " + srv.URL + "/missing. No retries left. Error: 404 Client Error: Not Found for url: " + srv.URL + "/missing"
	if rec.Code != 500 || rec.Body.String() != want {
		t.Fatalf("404: %d %q, want %q", rec.Code, rec.Body, want)
	}
	if n := missing.Load(); n != 3 {
		t.Errorf("404 fetched %d times, want OSWorld's 3 attempts", n)
	}
	// A body shorter than its Content-Length fails and leaves no file.
	dst = filepath.Join(dir, "short")
	rec = postJSON(t, h, "/setup/download_file", `{"url": "`+srv.URL+`/short", "path": "`+dst+`"}`)
	if rec.Code != 500 || !strings.HasPrefix(rec.Body.String(), "Failed to download "+srv.URL+"/short. No retries left. Error: ") {
		t.Fatalf("short: %d %q", rec.Code, rec.Body)
	}
	if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("partial download left behind: %v", err)
	}
}

func TestDownloadFileBadRequests(t *testing.T) {
	g := newFakeGuest() // nothing may run
	h := NewHandler(g, Options{})
	for _, c := range []struct {
		body string
		code int
		want string
	}{
		{`{"url": "http://x/y"}`, 400, "Path or URL not supplied!"},
		{`{"url": "", "path": "/tmp/x"}`, 400, "Path or URL not supplied!"},
		{`{"url": "file:///etc/shadow", "path": "x"}`, 500, "Failed to download file:///etc/shadow. No retries left. Error: Invalid URL"},
		{`{"url": "example.com/a", "path": "x"}`, 500, "Failed to download example.com/a. No retries left. Error: Invalid URL"},
	} {
		rec := postJSON(t, h, "/setup/download_file", c.body)
		got, _ := io.ReadAll(rec.Body)
		if rec.Code != c.code || !strings.HasPrefix(string(got), c.want) {
			t.Errorf("%s: %d %q, want %d %q", c.body, rec.Code, got, c.code, c.want)
		}
	}
	if len(g.runs) != 0 {
		t.Errorf("guest ran %q", g.runs)
	}
	// A VM without network fails at once, saying why, and runs nothing.
	h = NewHandler(g, Options{Network: vmm.NetworkNone})
	rec := postJSON(t, h, "/setup/download_file", `{"url": "http://example.com/a.txt", "path": "a.txt"}`)
	if got := rec.Body.String(); rec.Code != 500 || !strings.HasPrefix(got, "Failed to download http://example.com/a.txt. No retries left. Error: the VM has no network route out") {
		t.Errorf("no network: %d %q", rec.Code, got)
	}
	if len(g.runs) != 0 {
		t.Errorf("guest ran %q", g.runs)
	}
}
