package images

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
)

func TestGetUnknownListsKnown(t *testing.T) {
	s := &Store{CacheDir: t.TempDir()}
	_, err := s.Get("windows-xp")
	if !errors.Is(err, ErrUnknownImage) {
		t.Fatalf("err = %v, want ErrUnknownImage", err)
	}
	for _, name := range Names() {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error %q does not list known image %s", err, name)
		}
	}
}

func TestGetNotBuilt(t *testing.T) {
	s := &Store{CacheDir: t.TempDir()}
	_, err := s.Get("desktop")
	if !errors.Is(err, ErrNotBuilt) || !strings.Contains(err.Error(), "deskfarm image build desktop") {
		t.Fatalf("err = %v, want ErrNotBuilt with a hint", err)
	}
	if _, err := s.Ensure(canceledContext(), "desktop"); err == nil {
		t.Fatal("Ensure with a cancelled context built the desktop image")
	}
}

func canceledContext() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func TestGetBroken(t *testing.T) {
	breakers := map[string]struct {
		breakIt func(dir string) error
		want    string
	}{
		"missing kernel": {func(dir string) error { return os.Remove(filepath.Join(dir, KernelFile)) }, "missing vmlinuz"},
		"empty initrd":   {func(dir string) error { return os.WriteFile(filepath.Join(dir, InitrdFile), nil, 0o644) }, "empty initrd.img"},
		"truncated disk": {func(dir string) error { return os.Truncate(filepath.Join(dir, DiskFile), 3) }, "disk.qcow2 has 3 bytes"},
		"bad manifest": {func(dir string) error {
			return os.WriteFile(filepath.Join(dir, ManifestFile), []byte("{"), 0o644)
		}, "bad manifest.json"},
		"no manifest":  {func(dir string) error { return os.Remove(filepath.Join(dir, ManifestFile)) }, "bad manifest.json"},
		"two cmdlines": {func(dir string) error { return appendFile(filepath.Join(dir, CmdlineFile), "quiet\n", dir) }, "cmdline must be one"},
	}
	for name, b := range breakers {
		t.Run(name, func(t *testing.T) {
			s, _, _ := fakeStore(t, okScript)
			img, err := s.Build(context.Background(), "fake", false)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.breakIt(img.Dir); err != nil {
				t.Fatal(err)
			}
			_, err = s.Get("fake")
			if !errors.Is(err, ErrBroken) || !strings.Contains(err.Error(), b.want) {
				t.Fatalf("err = %v, want ErrBroken saying %q", err, b.want)
			}
			// Ensure repairs it by building again.
			if _, err := s.Ensure(context.Background(), "fake"); err != nil {
				t.Fatalf("Ensure after %s: %v", name, err)
			}
			if _, err := s.Get("fake"); err != nil {
				t.Fatalf("Get after Ensure: %v", err)
			}
		})
	}
}

// appendFile appends to a file whose size the manifest records, and fixes
// the manifest so that only the content is wrong.
func appendFile(path, text, dir string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	f.WriteString(text)
	f.Close()
	m, err := readManifest(dir)
	if err != nil {
		return err
	}
	st, _ := os.Stat(path)
	m.Sizes[filepath.Base(path)] = st.Size()
	os.Chmod(dir, 0o755)
	return writeManifest(dir, m)
}

func TestListAndPrune(t *testing.T) {
	s, progress, _ := fakeStore(t, okScript)
	old, err := s.Build(context.Background(), "fake", false)
	if err != nil {
		t.Fatal(err)
	}
	// A new version of the recipe makes the first build stale.
	fsys := s.recipes.(fstest.MapFS)
	fsys["fake/data.txt"] = &fstest.MapFile{Data: []byte("recipe data v2\n")}
	if _, err := s.Get("fake"); !errors.Is(err, ErrNotBuilt) {
		t.Fatalf("after a recipe change Get = %v, want ErrNotBuilt", err)
	}
	cur, err := s.Build(context.Background(), "fake", false)
	if err != nil {
		t.Fatal(err)
	}
	// A dead build directory and a build of a recipe that no longer exists.
	dead := filepath.Join(s.imagesDir(), ".fake.build-123")
	os.MkdirAll(filepath.Join(dead, "work"), 0o755)
	os.WriteFile(filepath.Join(dead, buildLockFile), nil, 0o644)
	gone := filepath.Join(s.imagesDir(), "retired-0123456789ab")
	os.MkdirAll(gone, 0o755)

	rows, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Listing{}
	for _, r := range rows {
		got[r.Path] = r
	}
	if r := got[cur.Dir]; r.Status != StatusBuilt || r.Hash != cur.Hash || r.SizeBytes != cur.SizeBytes {
		t.Errorf("current build listed as %+v", r)
	}
	if r := got[old.Dir]; r.Status != StatusStale || r.Hash != old.Hash {
		t.Errorf("old build listed as %+v", r)
	}
	if r := got[gone]; r.Status != StatusStale || r.Name != "retired" {
		t.Errorf("retired recipe listed as %+v", r)
	}
	if _, ok := got[dead]; ok {
		t.Errorf("dead build directory listed as building")
	}

	// A process holding a file of the old build (as QEMU holds its backing
	// file) keeps it.
	f, err := os.Open(old.Disk)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Prune()
	if err == nil || !strings.Contains(err.Error(), "has "+old.Disk+" open") {
		t.Errorf("Prune with the old disk open = %v, want it kept and reported", err)
	}
	if _, err := os.Stat(old.Dir); err != nil {
		t.Errorf("Prune removed an image in use: %v", err)
	}
	f.Close()

	if err := s.Prune(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{old.Dir, gone, dead} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("Prune left %s (%v)", p, err)
		}
	}
	if _, err := s.Get("fake"); err != nil {
		t.Errorf("Prune broke the current build: %v", err)
	}
	if !strings.Contains(progress.String(), "[prune] removed fake-"+old.Hash[:12]) {
		t.Errorf("progress: %s", progress)
	}
}
