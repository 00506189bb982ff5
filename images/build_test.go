package images

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/deskfarm/deskfarm/internal/testbuf"
)

// fakeOutputs is a build.sh fragment writing the four output files.
const fakeOutputs = `
out=$1
printf 'QFI\xfb fake disk' >"$out/disk.qcow2"
echo kernel >"$out/vmlinuz"
echo initrd >"$out/initrd.img"
echo "root=/dev/vda rw console=ttyS0" >"$out/cmdline"
`

// okScript is a fake recipe that checks its contract and succeeds.
const okScript = `set -eu
echo "::step 1/2 check the contract"
test -f "$DESKFARM_RECIPE_DIR/data.txt"
test "$(pwd)" != "$1"
test -n "$DESKFARM_MIRROR"
n=$(( $(cat "$FAKE_STATE/count" 2>/dev/null || echo 0) + 1 ))
echo $n >"$FAKE_STATE/count"
sleep "${FAKE_SLEEP:-0}"
echo "::step 2/2 write outputs"
` + fakeOutputs

// fakeStore returns a Store whose only recipe, "fake", is script. Its
// preparer puts FAKE_STATE (a directory the script may keep state in) and
// env into build.sh's environment.
func fakeStore(t *testing.T, script string, env ...string) (*Store, *testbuf.Buffer, string) {
	t.Helper()
	state := t.TempDir()
	progress := &testbuf.Buffer{}
	s := &Store{
		CacheDir: t.TempDir(),
		Log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		Progress: progress,
		recipes: fstest.MapFS{
			"fake/build.sh": {Data: []byte(script)},
			"fake/data.txt": {Data: []byte("recipe data\n")},
		},
		preparers: map[string]preparer{
			"fake": func(ctx context.Context, s *Store, workDir string) (prepared, error) {
				return prepared{Env: append([]string{"FAKE_STATE=" + state}, env...)}, nil
			},
		},
		tick: 100 * time.Millisecond,
	}
	return s, progress, state
}

// leftovers lists what besides cache entries and lock files is in the
// images directory: temporary build directories that were not removed.
func leftovers(t *testing.T, s *Store) []string {
	t.Helper()
	entries, err := os.ReadDir(s.imagesDir())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".lock") || entryPattern.MatchString(e.Name()) {
			continue
		}
		out = append(out, e.Name())
	}
	return out
}

func TestBuildFakeRecipe(t *testing.T) {
	s, progress, state := fakeStore(t, okScript, "FAKE_SLEEP=0.5")
	img, err := s.Build(context.Background(), "fake", false)
	if err != nil {
		t.Fatal(err)
	}
	hash, err := s.Hash("fake")
	if err != nil {
		t.Fatal(err)
	}
	if img.Hash != hash || img.Dir != filepath.Join(s.CacheDir, "images", "fake-"+hash[:12]) {
		t.Errorf("image %+v, want hash %s in its cache dir", img, hash)
	}
	if img.Cmdline != "root=/dev/vda rw console=ttyS0" {
		t.Errorf("cmdline %q", img.Cmdline)
	}
	wantModes := map[string]os.FileMode{"": 0o755, DiskFile: 0o444, KernelFile: 0o644, InitrdFile: 0o644, CmdlineFile: 0o644, ManifestFile: 0o644}
	for f, want := range wantModes {
		st, err := os.Stat(filepath.Join(img.Dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != want {
			t.Errorf("%s mode %v, want %v", filepath.Join(img.Dir, f), st.Mode().Perm(), want)
		}
	}
	var m manifest
	data, _ := os.ReadFile(filepath.Join(img.Dir, ManifestFile))
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if m.Name != "fake" || m.Hash != hash || m.Sizes[KernelFile] != 7 || len(m.Steps) != 2 || m.BuiltAt.IsZero() {
		t.Errorf("manifest %+v", m)
	}
	if left := leftovers(t, s); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	logData, err := os.ReadFile(s.logPath("fake", hash))
	if err != nil || !strings.Contains(string(logData), "::step 2/2 write outputs") {
		t.Errorf("build log: %v\n%s", err, logData)
	}
	for _, want := range []string{"[fake] step 1/2: check the contract (", "[fake] still working on step 1/2", "[fake] step 2/2: write outputs (", "[fake] built in "} {
		if !strings.Contains(progress.String(), want) {
			t.Errorf("progress lacks %q:\n%s", want, progress)
		}
	}

	// Cached: a second Build does not run the recipe; Get and Ensure agree.
	if _, err := s.Build(context.Background(), "fake", false); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get("fake"); err != nil || got != img {
		t.Errorf("Get = %+v, %v; want %+v", got, err, img)
	}
	if got, err := s.Ensure(context.Background(), "fake"); err != nil || got != img {
		t.Errorf("Ensure = %+v, %v", got, err)
	}
	if n, _ := os.ReadFile(filepath.Join(state, "count")); strings.TrimSpace(string(n)) != "1" {
		t.Errorf("recipe ran %s times, want 1", n)
	}
}

func TestBuildForceReplaces(t *testing.T) {
	s, _, state := fakeStore(t, okScript)
	first, err := s.Build(context.Background(), "fake", false)
	if err != nil {
		t.Fatal(err)
	}
	second, err := s.Build(context.Background(), "fake", true)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := os.ReadFile(filepath.Join(state, "count")); strings.TrimSpace(string(n)) != "2" {
		t.Errorf("recipe ran %s times, want 2", n)
	}
	if first.Dir != second.Dir || second.BuiltAt.Before(first.BuiltAt) {
		t.Errorf("forced rebuild: %+v then %+v", first, second)
	}
	// Another disk: another build, which a reload tells too.
	if len(first.Build) != 16 || second.Build == first.Build {
		t.Errorf("builds %q then %q, want two of 16 hex digits", first.Build, second.Build)
	}
	if got, err := s.Get("fake"); err != nil || got.Build != second.Build {
		t.Errorf("Get after the rebuild: build %q, %v; want %q", got.Build, err, second.Build)
	}
	if left := leftovers(t, s); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

func TestBuildFailureKeepsTail(t *testing.T) {
	script := `echo "::step 1/1 fail"
for i in $(seq 1 80); do echo "log line $i"; done
echo "the real problem" >&2
exit 3
`
	s, progress, _ := fakeStore(t, script)
	_, err := s.Build(context.Background(), "fake", false)
	if !errors.Is(err, ErrBuildFailed) {
		t.Fatalf("err = %v, want ErrBuildFailed", err)
	}
	msg := err.Error()
	for _, want := range []string{"exit status 3", "log line 80", "log line 32", "the real problem", "last 50 lines"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "log line 31\n") {
		t.Errorf("error has more than the last 50 lines:\n%s", msg)
	}
	if _, err := s.Get("fake"); !errors.Is(err, ErrNotBuilt) {
		t.Errorf("after a failed build Get = %v, want ErrNotBuilt", err)
	}
	if left := leftovers(t, s); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	if !strings.Contains(progress.String(), "[fake] failed after") {
		t.Errorf("progress: %s", progress)
	}
}

func TestBuildMissingOutput(t *testing.T) {
	s, _, _ := fakeStore(t, `echo kernel >"$1/vmlinuz"`)
	_, err := s.Build(context.Background(), "fake", false)
	if !errors.Is(err, ErrBuildFailed) || !strings.Contains(err.Error(), "did not write disk.qcow2") {
		t.Fatalf("err = %v, want ErrBuildFailed naming disk.qcow2", err)
	}
}

// processGone reports whether pid has exited (a zombie counts as gone).
func processGone(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// "pid (comm) S ...": the state follows the last ')'.
	s := string(data)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z' || s[i+2] == 'X'
	}
	return false
}

func TestBuildCancelKillsGroup(t *testing.T) {
	script := `sleep 300 &
echo $! >"$FAKE_STATE/child.pid"
echo "::step 1/1 wait forever"
wait
`
	s, _, state := fakeStore(t, script)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := s.Build(ctx, "fake", false)
		done <- err
	}()
	pidFile := filepath.Join(state, "child.pid")
	var pid int
	for deadline := time.Now().Add(10 * time.Second); pid == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("build.sh did not start its child")
		}
		if data, err := os.ReadFile(pidFile); err == nil && strings.HasSuffix(string(data), "\n") {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(data)))
		}
	}
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	case <-time.After(killGrace + 5*time.Second):
		t.Fatal("Build did not return after cancellation")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("cancellation took %v", d)
	}
	for deadline := time.Now().Add(2 * time.Second); !processGone(pid); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("child %d of build.sh survived the cancellation", pid)
		}
	}
	if left := leftovers(t, s); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	if _, err := s.Get("fake"); !errors.Is(err, ErrNotBuilt) {
		t.Errorf("after a cancelled build Get = %v, want ErrNotBuilt", err)
	}
}

func TestBuildConcurrentSameRecipe(t *testing.T) {
	s, progress, state := fakeStore(t, okScript, "FAKE_SLEEP=1")
	var wg sync.WaitGroup
	imgs := make([]Image, 2)
	errs := make([]error, 2)
	for i := range imgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			imgs[i], errs[i] = s.Build(context.Background(), "fake", false)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("build %d: %v", i, err)
		}
	}
	if imgs[0] != imgs[1] {
		t.Errorf("builds disagree: %+v vs %+v", imgs[0], imgs[1])
	}
	if n, _ := os.ReadFile(filepath.Join(state, "count")); strings.TrimSpace(string(n)) != "1" {
		t.Errorf("recipe ran %s times, want 1", n)
	}
	if !strings.Contains(progress.String(), "waiting for another build") {
		t.Errorf("second build did not say it waited:\n%s", progress)
	}
	if left := leftovers(t, s); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// TestBuildUnmountsLeftovers checks that a recipe that dies with a file
// system mounted in its work dir does not make the builder delete through
// the mount, and that the mount is gone afterwards.
func TestBuildUnmountsLeftovers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	script := `set -e
mkdir -p rootfs/proc
mount -t tmpfs deskfarm-test rootfs/proc
echo keep >rootfs/proc/marker
pwd >"$FAKE_STATE/workdir"
exit 1
`
	s, _, state := fakeStore(t, script)
	_, err := s.Build(context.Background(), "fake", false)
	if !errors.Is(err, ErrBuildFailed) {
		t.Fatalf("err = %v, want ErrBuildFailed", err)
	}
	work, _ := os.ReadFile(filepath.Join(state, "workdir"))
	mounts, err := mountsUnder(strings.TrimSpace(string(work)))
	if err != nil {
		t.Fatal(err)
	}
	if len(mounts) > 0 {
		for _, m := range mounts {
			syscall.Unmount(m, syscall.MNT_DETACH)
		}
		t.Fatalf("still mounted after the build: %v", mounts)
	}
	if left := leftovers(t, s); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

func TestBuildUnknown(t *testing.T) {
	s, _, _ := fakeStore(t, okScript)
	_, err := s.Build(context.Background(), "nope", false)
	if !errors.Is(err, ErrUnknownImage) || !strings.Contains(err.Error(), "known: fake") {
		t.Errorf("err = %v, want ErrUnknownImage listing fake", err)
	}
}

// TestBuildOnBase: a recipe with a "base" file gets the base recipe's files
// in DESKFARM_BASE_DIR, and its hash follows the base's files, so a fix to
// the base rebuilds the variant too.
func TestBuildOnBase(t *testing.T) {
	s, _, _ := fakeStore(t, okScript)
	fsys := s.recipes.(fstest.MapFS)
	fsys["variant/base"] = &fstest.MapFile{Data: []byte("fake\n")}
	fsys["variant/data.txt"] = &fstest.MapFile{Data: []byte("variant data\n")}
	fsys["variant/build.sh"] = &fstest.MapFile{Data: []byte(`set -eu
echo "::step 1/1 check the base"
test "$(cat "$DESKFARM_BASE_DIR/data.txt")" = "recipe data"
test "$(cat "$DESKFARM_RECIPE_DIR/data.txt")" = "variant data"
test -x "$DESKFARM_BASE_DIR/build.sh"
` + fakeOutputs)}
	if _, err := s.Build(context.Background(), "variant", false); err != nil {
		t.Fatal(err)
	}
	before, err := s.Hash("variant")
	if err != nil {
		t.Fatal(err)
	}
	fsys["fake/data.txt"] = &fstest.MapFile{Data: []byte("recipe data, fixed\n")}
	after, err := s.Hash("variant")
	if err != nil {
		t.Fatal(err)
	}
	if before == after {
		t.Errorf("the variant's hash did not change with its base's files")
	}
	if _, err := s.Get("variant"); !errors.Is(err, ErrNotBuilt) {
		t.Errorf("after a change to the base, Get = %v, want ErrNotBuilt", err)
	}

	for base, want := range map[string]string{
		"nosuch\n": `recipe variant: base names "nosuch"; want another recipe (known: fake, variant)`,
		"variant":  `recipe variant: base names "variant"; want another recipe`,
	} {
		fsys["variant/base"] = &fstest.MapFile{Data: []byte(base)}
		if _, err := s.Hash("variant"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("base %q: err %v, want %q", base, err, want)
		}
	}
	fsys["variant/base"] = &fstest.MapFile{Data: []byte("fake")}
	fsys["fake/base"] = &fstest.MapFile{Data: []byte("variant")}
	if _, err := s.Hash("variant"); err == nil || !strings.Contains(err.Error(), "one level is supported") {
		t.Errorf("base with a base: err %v", err)
	}
}
