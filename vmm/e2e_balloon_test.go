package vmm_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/internal/testenv"
	"github.com/deskfarm/deskfarm/vmm"
)

// qemuRSSMiB is the resident set of VM vm's QEMU process, from
// /proc/PID/status (libvirt writes the pid to /run/libvirt/qemu).
func qemuRSSMiB(t *testing.T, vm string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(vmm.DefaultQEMUPidDir, vmm.DomainPrefix+vm+".pid"))
	if err != nil {
		t.Fatalf("qemu pid of vm %s: %v", vm, err)
	}
	f, err := os.Open(filepath.Join("/proc", strings.TrimSpace(string(b)), "status"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kib, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return kib / 1024
		}
	}
	t.Fatalf("no VmRSS in %s", f.Name())
	return 0
}

// Each image's guest has a virtio balloon whose driver negotiated free page
// reporting, with the image as built (desktop: udev loads virtio_balloon;
// tiny: its modules.list), and memory the guest frees leaves its QEMU's
// resident set on the host.
func TestE2EBalloonFreePageReporting(t *testing.T) {
	for _, img := range []string{"tiny", "desktop"} {
		t.Run(img, func(t *testing.T) { checkFreePageReporting(t, img) })
	}
}

func checkFreePageReporting(t *testing.T, img string) {
	m := testenv.Manager(t, img)
	ctx := context.Background()
	opts := vmm.CreateOptions{Image: img, MemoryMiB: 1024, VCPUs: 2}
	vm, err := m.Create(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if vm.Start == vmm.StartBoot {
		// A booted VM has touched most of its RAM on the way: measured on
		// one from the saved state it left, as farms run most VMs.
		if err := m.Destroy(ctx, vm.ID); err != nil {
			t.Fatal(err)
		}
		if vm, err = m.Create(ctx, opts); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%s ready (started by %s)", img, vm.Start)

	// The balloon is virtio device 5; VIRTIO_BALLOON_F_REPORTING is feature
	// bit 5, the sixth character of the negotiated features.
	res := mustExec(t, m, vm.ID, "sh", "-c", `for d in /sys/bus/virtio/devices/*; do
		[ "$(cat $d/device)" = 0x0005 ] || continue
		echo "$(basename "$(readlink $d/driver)") $(cut -c6 $d/features)"
	done`)
	if got := strings.TrimSpace(string(res.Stdout)); got != "virtio_balloon 1" {
		t.Fatalf("guest balloon (driver, reporting bit): got %q, want \"virtio_balloon 1\"", got)
	}

	// 384 MiB in the guest's RAM-only /dev/shm, then freed.
	const fillMiB = 384
	before := qemuRSSMiB(t, vm.ID)
	mustExec(t, m, vm.ID, "dd", "if=/dev/zero", "of=/dev/shm/fill", "bs=1M", fmt.Sprint("count=", fillMiB))
	filled := qemuRSSMiB(t, vm.ID)
	mustExec(t, m, vm.ID, "rm", "/dev/shm/fill")
	t.Logf("qemu rss: %d MiB before, %d MiB with %d MiB in the guest's /dev/shm", before, filled, fillMiB)
	awaitRSS(t, vm.ID, filled-fillMiB*2/3, filled, "the guest freed the file")

	// A reset's loadvm writes the ready state's zeros into the pages the
	// guest had used, which stay resident unless the restored guest
	// reports them free again: it does, since its ready state was saved
	// before it had reported its free memory (vmm's shrinkRAM). The RSS
	// must come back to within a third of the file of what it was before.
	base := qemuRSSMiB(t, vm.ID)
	mustExec(t, m, vm.ID, "dd", "if=/dev/urandom", "of=/dev/shm/fill", "bs=1M", fmt.Sprint("count=", fillMiB))
	filled = qemuRSSMiB(t, vm.ID)
	t.Logf("qemu rss: %d MiB before, %d MiB with %d MiB of random bytes in the guest's /dev/shm", base, filled, fillMiB)
	if filled-base < fillMiB/2 {
		t.Fatalf("the guest's %d MiB file added %d MiB to its QEMU: nothing to see given back", fillMiB, filled-base)
	}
	if _, err := m.Reset(ctx, vm.ID); err != nil {
		t.Fatal(err)
	}
	awaitRSS(t, vm.ID, base+fillMiB/3, filled, "the reset")
}

// awaitRSS waits up to 90 s for the VM's QEMU to be at most want MiB
// resident (from filled, with the guest's file), and fails otherwise.
func awaitRSS(t *testing.T, vm string, want, filled int, since string) {
	t.Helper()
	t0 := time.Now()
	deadline := t0.Add(90 * time.Second)
	for {
		now := qemuRSSMiB(t, vm)
		if now <= want {
			t.Logf("qemu rss %d MiB (%d MiB with the file) %s after %s", now, filled, time.Since(t0).Round(100*time.Millisecond), since)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("qemu rss still %d MiB (%d MiB with the file, want at most %d) %s after %s", now, filled, want, time.Since(t0).Round(time.Second), since)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
