package vmm

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// A VM from saved state is ready once loadvm and the clock are done, before
// libvirt has opened its connection to the restored guest agent (the old
// create waited for that, in a wait-agent step); an agent call made
// meanwhile waits for the connection, then runs.
func TestCreateFromSavedStateAgentCallsWait(t *testing.T) {
	hv := newFakeHV()
	f := newTestFarm(t, hv, func(c *Config) { c.AgentTimeout = 5 * time.Second })
	first, err := f.m.Create(context.Background(), tinyOpts)
	if err != nil {
		t.Fatal(err)
	}
	hv.holdAgentEvents = true
	vm, err := f.m.Create(context.Background(), CreateOptions{Image: "tiny", MemoryMiB: 256, VCPUs: 1})
	if err != nil {
		t.Fatalf("create from saved state: %v (it must not wait for the agent)", err)
	}
	if vm.Start != StartSavedState || vm.State != StateReady {
		t.Fatalf("vm = %+v", vm)
	}
	done := make(chan error, 1)
	go func() {
		_, err := f.m.Exec(context.Background(), vm.ID, ExecRequest{Argv: []string{"true"}})
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("exec returned (%v) before libvirt opened its agent connection", err)
	case <-time.After(300 * time.Millisecond):
	}
	hv.agentLifecycle(vm.Domain, agentConnected)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exec once the agent is connected: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("exec did not run after the agent connected")
	}
	waitFor(t, func() bool { return hv.agentSubscriptions() == 0 })
	for _, id := range []string{first.ID, vm.ID} {
		if err := f.m.Destroy(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	}
	f.assertEmpty(t)
}

// A create from saved state takes the spare copy of the saved ready state
// made ahead of time, and the next spare is made; a saved state replaced by
// a new file (another guest's RAM) never hands out the old one's spare.
func TestCreateFromSavedStateTakesSpare(t *testing.T) {
	f := newTestFarm(t, newFakeHV(), nil)
	ctx := context.Background()
	first, err := f.m.Create(ctx, tinyOpts)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := f.m.templatePath(BaseImage{Name: "tiny", Hash: "abc", Build: "b1"}, CreateOptions{Image: "tiny", MemoryMiB: 256, VCPUs: 1, Width: first.Width, Height: first.Height})
	spare := func() string {
		p, err := sparePath(tmpl)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	waitFor(t, func() bool { return fileExists(spare()) })
	opts := CreateOptions{Image: "tiny", MemoryMiB: 256, VCPUs: 1}
	vm, err := f.m.Create(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if vm.Start != StartSavedState {
		t.Fatalf("vm started by %s", vm.Start)
	}
	want, _ := os.ReadFile(tmpl)
	if got, _ := os.ReadFile(filepath.Join(filepath.Dir(vm.VNCSocket), "disk.qcow2")); !bytes.Equal(got, want) {
		t.Fatal("overlay from the spare is not the saved ready state")
	}
	waitFor(t, func() bool { return fileExists(spare()) })

	// Another file in the saved state's place: its first create copies it.
	next := []byte("another saved ready state")
	if err := os.WriteFile(tmpl+".new", next, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmpl+".new", tmpl); err != nil {
		t.Fatal(err)
	}
	vm2, err := f.m.Create(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(filepath.Dir(vm2.VNCSocket), "disk.qcow2")); !bytes.Equal(got, next) {
		t.Fatalf("overlay is %d bytes of the replaced saved state's spare, want the new saved state", len(got))
	}
	// Its spare replaces the old one's.
	waitFor(t, func() bool { return fileExists(spare()) })
	if old, _ := filepath.Glob(tmpl + ".spare-*"); len(old) != 1 {
		t.Fatalf("spares %v, want the new saved state's alone", old)
	}
	for _, id := range []string{first.ID, vm.ID, vm2.ID} {
		if err := f.m.Destroy(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	f.assertEmpty(t)
}

// A farm starting removes the saved ready states no VM can start from (an
// image rebuilt, a recipe gone, an older hardware version, an unversioned
// name from before hardware versions) with their spares, and keeps the
// current ones, of any size, accelerator or balloon setting, with theirs,
// and files not its own.
func TestPruneSavedRemovesOutdated(t *testing.T) {
	dir := t.TempDir()
	cur, old := "0123456789abcdef", "fedcba9876543210"
	hw, prev := fmt.Sprintf("-hw%d", hardwareVersion), fmt.Sprintf("-hw%d", hardwareVersion-1)
	keep := []string{
		"desktop-" + cur + hw + "-1024m-2c-1280x800-tcg.qcow2",
		"desktop-" + cur + hw + "-1024m-2c-1280x800-tcg.qcow2.spare-42",
		"desktop-" + cur + hw + "-2048m-2c-1920x1080-kvm-net.qcow2",
		"desktop-" + cur + hw + "nb-1024m-2c-1280x800-tcg.qcow2",
		"notes.txt",
	}
	gone := []string{
		"desktop-" + cur + prev + "-1024m-2c-1280x800-tcg.qcow2",
		"desktop-" + cur + prev + "-1024m-2c-1280x800-tcg.qcow2.spare-42",
		"desktop-" + cur + "-hw1-1024m-2c-1280x800-tcg.qcow2",
		"desktop-" + old + hw + "-1024m-2c-1280x800-tcg.qcow2",
		"desktop-" + old + hw + "-1024m-2c-1280x800-tcg.qcow2.spare-7",
		"desktop-" + cur + "-1024m-2c-1280x800-tcg.qcow2",
		"retired-" + cur + hw + "-1024m-2c-1280x800-tcg.qcow2",
	}
	for _, n := range append(slices.Clone(keep), gone...) {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pruneSaved(dir, oneImage{BaseImage{Name: "desktop", Hash: cur + "0011"}}, slog.New(slog.DiscardHandler))
	checkLeft(t, dir, keep)
}

// A saved ready state holds RAM over one build's disk: a rebuild of the
// same recipe (images.Image.Build) names another, and prunes the old.
func TestSavedStateNamesTheBuild(t *testing.T) {
	m := &Manager{cfg: Config{StateDir: t.TempDir()}, accel: "tcg"}
	opts := CreateOptions{Image: "desktop", MemoryMiB: 1024, VCPUs: 2, Width: 1280, Height: 800}
	hash := strings.Repeat("ab", 32)
	first, second := BaseImage{Name: "desktop", Hash: hash, Build: "1111111111111111"}, BaseImage{Name: "desktop", Hash: hash, Build: "2222222222222222"}
	a, b := m.templatePath(first, opts), m.templatePath(second, opts)
	if a == b {
		t.Fatalf("two builds of one recipe share the saved state %s", a)
	}
	dir := filepath.Dir(a)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{a, a + ".spare-1", b} {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pruneSaved(dir, oneImage{second}, slog.New(slog.DiscardHandler))
	checkLeft(t, dir, []string{filepath.Base(b)})
}

// checkLeft fails t unless dir holds exactly want.
func checkLeft(t *testing.T, dir string, want []string) {
	t.Helper()
	var left []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		left = append(left, e.Name())
	}
	want = slices.Sorted(slices.Values(want))
	if !slices.Equal(left, want) {
		t.Errorf("left %q, want %q", left, want)
	}
}

// oneImage resolves its image's name and no other.
type oneImage struct{ img BaseImage }

func (o oneImage) Resolve(name string) (BaseImage, error) {
	if name != o.img.Name {
		return BaseImage{}, ErrUnknownImage
	}
	return o.img, nil
}
