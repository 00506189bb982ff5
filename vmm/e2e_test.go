package vmm_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/images"
	"github.com/deskfarm/deskfarm/internal/testenv"
	"github.com/deskfarm/deskfarm/vmm"
)

// These tests run real VMs on a real libvirtd and QEMU; `make test` runs them.

func virsh(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("virsh", append([]string{"-c", "qemu:///system"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("virsh %v: %v: %s", args, err, out)
	}
	return string(out)
}

func domainExists(t *testing.T, name string) bool {
	t.Helper()
	for _, n := range strings.Fields(virsh(t, "list", "--all", "--name")) {
		if n == name {
			return true
		}
	}
	return false
}

// diffFraction is the share of pixels that differ between a and b.
func diffFraction(a, b *image.RGBA) float64 {
	if a.Bounds() != b.Bounds() {
		return 1
	}
	n := 0
	for i := 0; i < len(a.Pix); i += 4 {
		if !bytes.Equal(a.Pix[i:i+3], b.Pix[i:i+3]) {
			n++
		}
	}
	return float64(n) / float64(len(a.Pix)/4)
}

func mustExec(t *testing.T, m *vmm.Manager, id string, argv ...string) vmm.ExecResult {
	t.Helper()
	res, err := m.Exec(context.Background(), id, vmm.ExecRequest{Argv: argv, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("exec %v: %v", argv, err)
	}
	return res
}

func TestE2ETinyLifecycle(t *testing.T) {
	m := testenv.Manager(t, "tiny")
	ctx := context.Background()
	start := time.Now()
	vm, err := m.Create(ctx, vmm.CreateOptions{Image: "tiny", MemoryMiB: 256, VCPUs: 1, Boot: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("tiny ready in %s (accel %s)", time.Since(start).Round(time.Millisecond), vm.Accel)
	if vm.State != vmm.StateReady || vm.Domain != "deskfarm-"+vm.ID {
		t.Fatalf("vm = %+v", vm)
	}
	if !domainExists(t, vm.Domain) {
		t.Fatalf("domain %s not in virsh list", vm.Domain)
	}
	if !strings.Contains(virsh(t, "dominfo", vm.Domain), "running") {
		t.Fatal("domain not running")
	}
	if fi, err := os.Stat(vm.VNCSocket); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("vnc socket %s: %v", vm.VNCSocket, err)
	}
	xml := virsh(t, "dumpxml", vm.Domain)
	for _, want := range []string{"type='socket'", "org.qemu.guest_agent.0", "bus='virtio'", `xmlns="https://github.com/deskfarm/deskfarm/xmlns/vm/1"`, "<memory unit='KiB'>262144"} {
		if !strings.Contains(xml, want) {
			t.Errorf("domain xml lacks %q", want)
		}
	}
	if strings.Contains(xml, "port=") && strings.Contains(xml, "<graphics type='vnc' port") {
		t.Error("vnc listens on a tcp port")
	}
	// No network unless asked for.
	if strings.Contains(xml, "<interface") || strings.Contains(xml, "-netdev") {
		t.Error("a vm created without a network has a network device")
	}
	// Nothing of the VM is readable by other users: QEMU's user owns its
	// directory alone, and the disk is private.
	for path, want := range map[string]os.FileMode{filepath.Dir(vm.VNCSocket): 0o700, filepath.Join(filepath.Dir(vm.VNCSocket), "disk.qcow2"): 0o600} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %o, want %o", path, fi.Mode().Perm(), want)
		}
	}

	// Guest agent: argv, stdin, exit code, stderr, timeout.
	if res := mustExec(t, m, vm.ID, "echo", "hello world"); string(res.Stdout) != "hello world\n" || res.ExitCode != 0 {
		t.Fatalf("echo: %+v", res)
	}
	res, err := m.Exec(ctx, vm.ID, vmm.ExecRequest{Argv: []string{"cat"}, Stdin: []byte("from stdin\x00\xff"), Timeout: 10 * time.Second})
	if err != nil || string(res.Stdout) != "from stdin\x00\xff" {
		t.Fatalf("cat stdin: %+v %v", res, err)
	}
	// Stdin bigger than one agent message goes through a guest file.
	bigIn := bytes.Repeat([]byte("deskfarm\x00\xff"), 30000) // 300 kB
	res, err = m.Exec(ctx, vm.ID, vmm.ExecRequest{Argv: []string{"cat"}, Stdin: bigIn, Timeout: 30 * time.Second})
	if err != nil || !bytes.Equal(res.Stdout, bigIn) {
		t.Fatalf("cat of %d bytes of stdin: got %d bytes, %v", len(bigIn), len(res.Stdout), err)
	}
	if res := mustExec(t, m, vm.ID, "sh", "-c", "ls -a /tmp | grep -c deskfarm-stdin || true"); strings.TrimSpace(string(res.Stdout)) != "0" {
		t.Fatalf("staged stdin left in the guest: %q", res.Stdout)
	}
	if res := mustExec(t, m, vm.ID, "sh", "-c", "echo oops >&2; exit 3"); res.ExitCode != 3 || string(res.Stderr) != "oops\n" {
		t.Fatalf("exit code: %+v", res)
	}
	_, err = m.Exec(ctx, vm.ID, vmm.ExecRequest{Argv: []string{"sleep", "30"}, Timeout: time.Second})
	if !errors.Is(err, vmm.ErrTimeout) {
		t.Fatalf("timeout: %v", err)
	}
	if _, err := m.Exec(ctx, vm.ID, vmm.ExecRequest{Argv: []string{"/no/such/program"}}); err == nil {
		t.Fatal("exec of a missing program succeeded")
	}

	// Files round trip, including a large binary one.
	big := make([]byte, 3<<20+17)
	for i := range big {
		big[i] = byte(i * 7)
	}
	if err := m.WriteFile(ctx, vm.ID, "/tmp/big.bin", big, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := m.ReadFile(ctx, vm.ID, "/tmp/big.bin")
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("read back %d bytes (want %d): %v", len(got), len(big), err)
	}
	if res := mustExec(t, m, vm.ID, "stat", "-c", "%a", "/tmp/big.bin"); strings.TrimSpace(string(res.Stdout)) != "600" {
		t.Fatalf("mode: %q", res.Stdout)
	}
	if _, err := m.ReadFile(ctx, vm.ID, "/tmp/none"); err == nil || !strings.Contains(err.Error(), "/tmp/none") {
		t.Fatalf("missing file: %v", err)
	}
	if _, err := m.ReadFile(ctx, vm.ID, "relative"); !errors.Is(err, vmm.ErrInvalid) {
		t.Fatalf("relative path: %v", err)
	}

	// Reset: a file written and a screen changed since the snapshot are gone.
	ready, err := m.Screenshot(ctx, vm.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.WriteFile(ctx, vm.ID, "/tmp/episode", []byte("dirty"), 0); err != nil {
		t.Fatal(err)
	}
	virsh(t, "send-key", vm.Domain, "KEY_H", "KEY_I")
	deadline := time.Now().Add(20 * time.Second)
	for {
		now, err := m.Screenshot(ctx, vm.ID)
		if err != nil {
			t.Fatal(err)
		}
		if diffFraction(ready, now) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("typed keys never changed the tiny guest's screen")
		}
		time.Sleep(200 * time.Millisecond)
	}
	for i := 0; i < 3; i++ {
		rr, err := m.Reset(ctx, vm.ID)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("reset %d took %s", i, rr.Duration.Round(time.Millisecond))
	}
	if _, err := m.ReadFile(ctx, vm.ID, "/tmp/episode"); err == nil {
		t.Fatal("file written before reset survived it")
	}
	after, err := m.Screenshot(ctx, vm.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d := diffFraction(ready, after); d != 0 {
		t.Fatalf("screen after reset differs from ready screen in %.4f%% of pixels", d*100)
	}
	// The clock was set to now, not left at snapshot time.
	res = mustExec(t, m, vm.ID, "date", "+%s")
	var guest int64
	if _, err := fmt.Sscan(strings.TrimSpace(string(res.Stdout)), &guest); err != nil {
		t.Fatalf("date: %q", res.Stdout)
	}
	if skew := time.Now().Unix() - guest; skew > 3 || skew < -3 {
		t.Fatalf("guest clock off by %d s after reset", skew)
	}

	// Destroy leaves nothing.
	if err := m.Destroy(ctx, vm.ID); err != nil {
		t.Fatal(err)
	}
	if domainExists(t, vm.Domain) {
		t.Fatal("domain still defined after destroy")
	}
	if _, err := os.Stat(filepath.Dir(vm.VNCSocket)); !os.IsNotExist(err) {
		t.Fatalf("vm dir still there: %v", err)
	}
	if err := m.Destroy(ctx, vm.ID); !errors.Is(err, vmm.ErrNotFound) {
		t.Fatalf("second destroy: %v", err)
	}
}

func TestE2EBadInput(t *testing.T) {
	m := testenv.Manager(t, "tiny")
	ctx := context.Background()
	cases := []struct {
		opts vmm.CreateOptions
		want error
		say  string
	}{
		{vmm.CreateOptions{Image: "windows95"}, vmm.ErrUnknownImage, "windows95"},
		{vmm.CreateOptions{}, vmm.ErrInvalid, "image"},
		{vmm.CreateOptions{Image: "tiny", MemoryMiB: 10 << 20}, vmm.ErrInsufficientResources, "memory_mib"},
		{vmm.CreateOptions{Image: "tiny", MemoryMiB: 16}, vmm.ErrInvalid, "memory_mib"},
		{vmm.CreateOptions{Image: "tiny", VCPUs: 999}, vmm.ErrInvalid, "vcpus"},
		{vmm.CreateOptions{Image: "tiny", Width: 10, Height: 10}, vmm.ErrInvalid, "width"},
	}
	for _, c := range cases {
		_, err := m.Create(ctx, c.opts)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.say) {
			t.Errorf("create %+v: got %v, want %v naming %q", c.opts, err, c.want, c.say)
		}
	}
	for _, op := range []func() error{
		func() error { _, err := m.Get(ctx, "nope"); return err },
		func() error { return m.Destroy(ctx, "nope") },
		func() error { _, err := m.Reset(ctx, "nope"); return err },
		func() error { _, err := m.Exec(ctx, "nope", vmm.ExecRequest{Argv: []string{"true"}}); return err },
	} {
		if err := op(); !errors.Is(err, vmm.ErrNotFound) || !strings.Contains(err.Error(), "nope") {
			t.Errorf("missing vm: %v", err)
		}
	}
	assertNoLeftovers(t)
}

// A failure in the middle of create unwinds: here the boot never finishes in time.
func TestE2ECreateFailureLeavesNothing(t *testing.T) {
	st := testenv.RequireVM(t, "tiny")
	ctx := context.Background()
	m, err := vmm.New(ctx, vmm.Config{StateDir: testenv.StateDir, Images: vmm.StoreImages{Store: st}, BootTimeout: 300 * time.Millisecond, LockWait: testenv.LockWait})
	if err != nil {
		t.Fatal(err)
	}
	// Boot: a saved ready state from an earlier test would skip the boot.
	_, err = m.Create(ctx, vmm.CreateOptions{Image: "tiny", MemoryMiB: 256, VCPUs: 1, Boot: true})
	if !errors.Is(err, vmm.ErrTimeout) || !strings.Contains(err.Error(), "wait-display") {
		testenv.Cleanup(t, m)
		t.Fatalf("create with a 300ms boot budget: %v", err)
	}
	// Checked while this farm holds the state dir: once it lets go, another
	// test process may start VMs there.
	assertNoLeftovers(t)
	testenv.Cleanup(t, m) // releases the state dir for the next farm

	// A broken base image is named as such, and leaves nothing either.
	bad := filepath.Join(t.TempDir(), "broken.qcow2")
	os.WriteFile(bad, []byte("not a qcow2 image"), 0o644)
	img, _ := st.Get("tiny")
	m2, err := vmm.New(ctx, vmm.Config{StateDir: testenv.StateDir, Images: fixedImage{vmm.BaseImage{Name: "broken", Disk: bad, Kernel: img.Kernel, Initrd: img.Initrd}}, LockWait: testenv.LockWait})
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Cleanup(t, m2)
	if _, err := m2.Create(ctx, vmm.CreateOptions{Image: "broken", MemoryMiB: 256, VCPUs: 1}); !errors.Is(err, vmm.ErrBrokenImage) {
		t.Fatalf("broken image: %v", err)
	}
	assertNoLeftovers(t)
}

type fixedImage struct{ img vmm.BaseImage }

func (f fixedImage) Resolve(string) (vmm.BaseImage, error) { return f.img, nil }

// assertNoLeftovers checks that no domain or directory of the test farm is
// left. Domains of other farms on the same libvirtd (a developer's serving
// farm) are not the tests' business.
func assertNoLeftovers(t *testing.T) {
	t.Helper()
	for _, n := range strings.Fields(virsh(t, "list", "--all", "--name")) {
		if strings.HasPrefix(n, vmm.DomainPrefix) && strings.Contains(virsh(t, "dumpxml", n), testenv.StateDir+"/vms/") {
			t.Errorf("leftover domain %s", n)
		}
	}
	entries, _ := os.ReadDir(filepath.Join(testenv.StateDir, "vms"))
	for _, e := range entries {
		t.Errorf("leftover vm dir %s", e.Name())
	}
}

// A second VM of the same image and size starts from the first one's saved
// ready state instead of booting: same screen, clean disk, right clock.
func TestE2ESavedStateStart(t *testing.T) {
	m := testenv.Manager(t, "tiny")
	ctx := context.Background()
	os.RemoveAll(filepath.Join(testenv.StateDir, "saved"))
	t.Cleanup(func() { os.RemoveAll(filepath.Join(testenv.StateDir, "saved")) })
	opts := vmm.CreateOptions{Image: "tiny", MemoryMiB: 256, VCPUs: 1}
	a, err := m.Create(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if a.Start != vmm.StartBoot {
		t.Fatalf("first vm started by %q, want %q", a.Start, vmm.StartBoot)
	}
	readyA, err := m.Screenshot(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.WriteFile(ctx, a.ID, "/tmp/from-a", []byte("a"), 0); err != nil {
		t.Fatal(err)
	}
	virsh(t, "send-key", a.Domain, "KEY_A")

	b, err := m.Create(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("boot: %.1fs, from saved state: %.1fs", a.BootSeconds, b.BootSeconds)
	if b.Start != vmm.StartSavedState {
		t.Fatalf("second vm started by %q, want %q", b.Start, vmm.StartSavedState)
	}
	// Ready comes before libvirt has opened its connection to the restored
	// guest agent: an agent call at once waits for it, it does not fail.
	mustExec(t, m, b.ID, "true")
	readyB, err := m.Screenshot(ctx, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d := diffFraction(readyA, readyB); d != 0 {
		t.Fatalf("vm from saved state shows a different screen (%.3f%% of pixels)", d*100)
	}
	if _, err := m.ReadFile(ctx, b.ID, "/tmp/from-a"); err == nil {
		t.Fatal("a file written in the first vm after its snapshot appears in the second")
	}
	res := mustExec(t, m, b.ID, "date", "+%s")
	var guest int64
	fmt.Sscan(strings.TrimSpace(string(res.Stdout)), &guest)
	if skew := time.Now().Unix() - guest; skew > 3 || skew < -3 {
		t.Fatalf("guest clock off by %d s", skew)
	}
	// Both VMs are independent: resetting one leaves the other alone.
	if _, err := m.Reset(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if b.VNCSocket == a.VNCSocket {
		t.Fatal("two vms share a vnc socket")
	}
	for _, id := range []string{a.ID, b.ID} {
		if err := m.Destroy(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	assertNoLeftovers(t)
}

// rebuildDir holds TestE2ERebuiltImageBootsAnew's image cache and state
// dir (scripts/check-leftovers.sh checks it): a rebuild of the shared
// cache's tiny would pull it from under the other tests' VMs.
const rebuildDir = "/var/lib/deskfarm-test-rebuild"

// A forced rebuild of an image is another disk under the same recipe: the
// next VM boots rather than load a ready state whose RAM belongs to the
// old disk, and a farm started after it removes the old build's state.
func TestE2ERebuiltImageBootsAnew(t *testing.T) {
	testenv.RequireVM(t, "tiny")
	ctx := context.Background()
	os.RemoveAll(rebuildDir)
	if err := os.MkdirAll(rebuildDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(rebuildDir) })
	st := &images.Store{CacheDir: filepath.Join(rebuildDir, "cache")}
	state := filepath.Join(rebuildDir, "state")
	opts := vmm.CreateOptions{Image: "tiny", MemoryMiB: 256, VCPUs: 1}
	var cur *vmm.Manager // destroyed on the way out, failed or not
	t.Cleanup(func() {
		if cur != nil {
			testenv.Cleanup(t, cur)
		}
	})
	open := func() *vmm.Manager {
		t.Helper()
		m, err := vmm.New(ctx, vmm.Config{StateDir: state, Images: vmm.StoreImages{Store: st}})
		if err != nil {
			t.Fatal(err)
		}
		cur = m
		return m
	}
	// create makes a VM, checks that its guest answers, destroys it and
	// says how it started.
	create := func(m *vmm.Manager) string {
		t.Helper()
		vm, err := m.Create(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Destroy(ctx, vm.ID)
		if res, err := m.Exec(ctx, vm.ID, vmm.ExecRequest{Argv: []string{"cat", "/proc/uptime"}}); err != nil || res.ExitCode != 0 {
			t.Fatalf("vm %s (started by %s): exec: %+v, %v", vm.ID, vm.Start, res, err)
		}
		return vm.Start
	}
	saved := func() []string {
		t.Helper()
		entries, _ := os.ReadDir(filepath.Join(state, "saved"))
		var out []string
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".qcow2") {
				out = append(out, e.Name())
			}
		}
		return out
	}
	first, err := st.Build(ctx, "tiny", false)
	if err != nil {
		t.Fatal(err)
	}
	m := open()
	if got := create(m); got != vmm.StartBoot {
		t.Errorf("the first vm of a new build started by %s, want %s", got, vmm.StartBoot)
	}
	if got := create(m); got != vmm.StartSavedState {
		t.Errorf("the second vm started by %s, want %s", got, vmm.StartSavedState)
	}
	old := saved()
	second, err := st.Build(ctx, "tiny", true)
	if err != nil {
		t.Fatal(err)
	}
	if second.Build == first.Build {
		t.Fatalf("a forced rebuild kept build %s", first.Build)
	}
	if got := create(m); got != vmm.StartBoot {
		t.Errorf("the first vm after a forced rebuild started by %s, want %s (the old build's saved state is another disk's)", got, vmm.StartBoot)
	}
	testenv.Cleanup(t, m)
	cur = nil
	m = open()
	now := saved()
	if len(old) != 1 || len(now) != 1 || now[0] == old[0] {
		t.Errorf("saved ready states: %q before the rebuild, %q after it and a restart; want the old build's replaced by the new one's", old, now)
	}
	if got := create(m); got != vmm.StartSavedState {
		t.Errorf("a vm of the new build after a restart started by %s, want %s", got, vmm.StartSavedState)
	}
}
