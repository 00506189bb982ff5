package vmm_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/internal/testenv"
	"github.com/deskfarm/deskfarm/vmm"
)

// waitEvent returns the first event of kind for vm id within d.
func waitEvent(t *testing.T, evs <-chan vmm.Event, id string, kind vmm.EventKind, d time.Duration) vmm.Event {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-evs:
			if !ok {
				t.Fatal("event channel closed")
			}
			if ev.VM.ID == id && ev.Kind == kind {
				return ev
			}
		case <-timer.C:
			t.Fatalf("no %s event for vm %s within %s", kind, id, d)
		}
	}
}

// qemuPid reads libvirt's pid file of a running domain.
func qemuPid(t *testing.T, domain string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/run/libvirt/qemu", domain+".pid"))
	if err != nil {
		t.Fatalf("QEMU pid file: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("QEMU pid file: %q", b)
	}
	cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if !strings.Contains(string(cmd), domain) {
		t.Fatalf("pid %d is not %s's QEMU: %q", pid, domain, cmd)
	}
	return pid
}

// A VM whose QEMU is killed, or whose guest powers itself off, is broken and
// announced within 2 s, without anyone touching it.
func TestE2EDeathIsAnnounced(t *testing.T) {
	m := testenv.Manager(t, "tiny")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	evs := m.Subscribe(ctx, "test")
	opts := vmm.CreateOptions{Image: "tiny", MemoryMiB: 256, VCPUs: 1}

	killed, err := m.Create(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(qemuPid(t, killed.Domain), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ev := waitEvent(t, evs, killed.ID, vmm.EventDied, 2*time.Second)
	t.Logf("kill -9: died after %s: %s", time.Since(start).Round(time.Millisecond), ev.Reason)
	if !strings.HasPrefix(ev.Reason, "qemu") || ev.VM.State != vmm.StateBroken {
		t.Fatalf("event %+v", ev)
	}
	if got, err := m.Get(ctx, killed.ID); err != nil || got.State != vmm.StateBroken {
		t.Fatalf("get after kill: %+v %v", got, err)
	}
	if _, err := m.Exec(ctx, killed.ID, vmm.ExecRequest{Argv: []string{"true"}}); !errors.Is(err, vmm.ErrNotRunning) || !errors.Is(err, vmm.ErrDead) {
		t.Fatalf("exec on a dead vm: %v", err)
	}

	off, err := m.Create(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	// The agent dies with the guest, so this exec may fail; the event is what counts.
	_, _ = m.Exec(ctx, off.ID, vmm.ExecRequest{Argv: []string{"poweroff", "-f"}, Timeout: 5 * time.Second})
	ev = waitEvent(t, evs, off.ID, vmm.EventDied, 10*time.Second)
	// libvirt usually reports the guest's shutdown before QEMU exits, so
	// the reason is known; on a loaded host its event can come after the
	// process watch's grace, and the exit is announced without the reason.
	t.Logf("poweroff: %s", ev.Reason)
	if ev.Reason != "guest powered off" && !strings.HasPrefix(ev.Reason, "qemu exited") || ev.VM.State != vmm.StateBroken {
		t.Fatalf("poweroff: event %+v", ev)
	}

	for _, id := range []string{killed.ID, off.ID} {
		if err := m.Destroy(ctx, id); err != nil {
			t.Fatal(err)
		}
		waitEvent(t, evs, id, vmm.EventDestroyed, time.Second)
	}
	assertNoLeftovers(t)
}

// capture is one real reply, with how it was obtained.
type capture struct {
	Command string `json:"command"`
	Output  string `json:"output"`
	Error   string `json:"error,omitempty"` // the libvirt error, when the call failed
}

type captureFile struct {
	Provenance string             `json:"provenance"`
	HMP        map[string]capture `json:"hmp"`
	QMP        map[string]capture `json:"qmp"`
	Agent      map[string]capture `json:"agent"`
}

// The HMP and agent replies the unit tests parse, taken from a real VM. With
// DESKFARM_CAPTURE=1 they are written to testdata/captures.json; either way
// the live replies must classify as the unit tests expect.
func TestE2ECaptureReplies(t *testing.T) {
	m := testenv.Manager(t, "tiny")
	ctx := context.Background()
	vm, err := m.Create(ctx, vmm.CreateOptions{Image: "tiny", MemoryMiB: 256, VCPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	qv, _ := exec.Command("qemu-system-x86_64", "--version").Output()
	lv, _ := exec.Command("libvirtd", "--version").Output()
	ga := mustExec(t, m, vm.ID, "sh", "-c", "qemu-ga --version 2>&1 || true")
	out := captureFile{
		Provenance: "captured by TestE2ECaptureReplies (vmm/e2e_events_test.go) on " + time.Now().UTC().Format("2006-01-02") +
			" from a tiny-image VM: " + strings.SplitN(string(qv), "\n", 2)[0] + "; " + strings.TrimSpace(string(lv)) +
			"; guest " + strings.TrimSpace(string(ga.Stdout)) + ". HMP through virDomainQemuMonitorCommand(HMP), QMP through virDomainQemuMonitorCommand, agent through virDomainQemuAgentCommand.",
		HMP: map[string]capture{}, QMP: map[string]capture{}, Agent: map[string]capture{}}
	hmp := func(name, cmd string, wantErr bool) {
		s, err := vmm.MonitorForTest(ctx, m, vm.ID, cmd)
		if err != nil {
			t.Fatalf("hmp %q: %v", cmd, err)
		}
		out.HMP[name] = capture{Command: cmd, Output: s}
		if got := vmm.ParseHMPResultForTest(s) != nil; got != wantErr {
			t.Errorf("hmp %q printed %q: parsed as error=%v, want %v", cmd, s, got, wantErr)
		}
	}
	// info prints a table, not an error: captured raw, parsed by the
	// snapshot list's unit test.
	info := func(name, cmd string) {
		s, err := vmm.MonitorForTest(ctx, m, vm.ID, cmd)
		if err != nil {
			t.Fatalf("hmp %q: %v", cmd, err)
		}
		out.HMP[name] = capture{Command: cmd, Output: s}
	}
	info("info-snapshots-ready", "info snapshots")
	hmp("savevm-ok", "savevm capture-test", false)
	hmp("savevm-second-ok", "savevm capture-test-with-a-name-longer-than-sixteen", false)
	info("info-snapshots-three", "info snapshots")
	// savevm of a name taken replaces that snapshot without a word.
	hmp("savevm-existing-ok", "savevm capture-test-with-a-name-longer-than-sixteen", false)
	hmp("delvm-second-ok", "delvm capture-test-with-a-name-longer-than-sixteen", false)
	hmp("loadvm-ok", "loadvm capture-test", false)
	hmp("delvm-ok", "delvm capture-test", false)
	hmp("loadvm-missing", "loadvm no-such-snapshot", true)
	// QEMU 7.2 prints nothing for a delvm of a snapshot no disk has.
	hmp("delvm-missing-ok", "delvm no-such-snapshot", false)
	hmp("screendump-bad-path", "screendump /nonexistent/dir/x.ppm", true)
	hmp("stop-ok", "stop", false)
	hmp("cont-ok", "cont", false)

	// QMP, as a fork's disk pivot asks it (pivot.go): the disk's nodes, a
	// mirror job to a new node (cancelled here, so the disk stays), an
	// error.
	qmp := func(name, cmd string, wantErr bool) {
		s, err := vmm.QMPForTest(ctx, m, vm.ID, cmd)
		if err != nil {
			t.Fatalf("qmp %q: %v", cmd, err)
		}
		out.QMP[name] = capture{Command: cmd, Output: s}
		if got := vmm.ParseQMPReplyForTest(name, s, nil) != nil; got != wantErr {
			t.Errorf("qmp %q answered %q: parsed as error=%v, want %v", cmd, s, got, wantErr)
		}
	}
	qmp("query-block", `{"execute":"query-block"}`, false)
	qmp("query-named-block-nodes", `{"execute":"query-named-block-nodes","arguments":{"flat":true}}`, false)
	qmp("query-jobs-none", `{"execute":"query-jobs"}`, false)
	dir := filepath.Join(testenv.StateDir, "vms", vm.ID)
	var disk struct {
		Size int64 `json:"virtual-size"`
	}
	if b, err := exec.Command("qemu-img", "info", "-U", "--output=json", filepath.Join(dir, "disk.qcow2")).Output(); err != nil || json.Unmarshal(b, &disk) != nil {
		t.Fatalf("qemu-img info of the disk: %v", err)
	}
	extra := filepath.Join(dir, "capture.qcow2")
	if b, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", extra, strconv.FormatInt(disk.Size, 10)).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img: %v: %s", err, b)
	}
	qemu, err := user.Lookup("libvirt-qemu")
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(qemu.Uid)
	if err := os.Chown(extra, uid, -1); err != nil {
		t.Fatal(err)
	}
	add := `{"execute":"blockdev-add","arguments":{"driver":"qcow2","node-name":"capture-node","file":{"driver":"file","filename":"` + extra + `"}}}`
	qmp("blockdev-add", add, false)
	qmp("blockdev-add-taken", add, true)
	qmp("blockdev-mirror", `{"execute":"blockdev-mirror","arguments":{"job-id":"capture-job","device":"libvirt-1-format","target":"capture-node","sync":"none"}}`, false)
	for i := 0; ; i++ {
		s, err := vmm.QMPForTest(ctx, m, vm.ID, `{"execute":"query-jobs"}`)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(s, `"ready"`) {
			out.QMP["query-jobs-ready"] = capture{Command: `{"execute":"query-jobs"}`, Output: s}
			break
		}
		if i == 100 {
			t.Fatalf("mirror job not ready: %s", s)
		}
		time.Sleep(20 * time.Millisecond)
	}
	qmp("job-cancel", `{"execute":"job-cancel","arguments":{"id":"capture-job"}}`, false)
	for i := 0; ; i++ {
		s, _ := vmm.QMPForTest(ctx, m, vm.ID, `{"execute":"query-jobs"}`)
		if !strings.Contains(s, "capture-job") {
			break
		}
		if i == 100 {
			t.Fatalf("cancelled mirror job still there: %s", s)
		}
		time.Sleep(20 * time.Millisecond)
	}
	qmp("blockdev-del", `{"execute":"blockdev-del","arguments":{"node-name":"capture-node"}}`, false)
	qmp("blockdev-del-missing", `{"execute":"blockdev-del","arguments":{"node-name":"capture-node"}}`, true)
	qmp("unknown-command", `{"execute":"no-such-command"}`, true)

	// After loadvm libvirt re-opens its agent link; Exec waits for it.
	mustExec(t, m, vm.ID, "true")
	agent := func(name, cmd string) string {
		s, err := vmm.AgentForTest(ctx, m, vm.ID, cmd)
		c := capture{Command: cmd, Output: s}
		if err != nil {
			c.Error = err.Error()
		}
		out.Agent[name] = c
		return s
	}
	r := agent("exec-start", `{"execute":"guest-exec","arguments":{"path":"sleep","arg":["2"],"capture-output":true}}`)
	var started struct {
		Return struct {
			PID int `json:"pid"`
		} `json:"return"`
	}
	if err := json.Unmarshal([]byte(r), &started); err != nil || started.Return.PID == 0 {
		t.Fatalf("guest-exec reply %q (%s): %v", r, out.Agent["exec-start"].Error, err)
	}
	agent("exec-status-running", `{"execute":"guest-exec-status","arguments":{"pid":`+strconv.Itoa(started.Return.PID)+`}}`)
	r = agent("file-open", `{"execute":"guest-file-open","arguments":{"path":"/etc/hostname","mode":"r"}}`)
	var opened struct {
		Return int `json:"return"`
	}
	if err := json.Unmarshal([]byte(r), &opened); err != nil {
		t.Fatalf("guest-file-open reply %q (%s): %v", r, out.Agent["file-open"].Error, err)
	}
	agent("file-read", `{"execute":"guest-file-read","arguments":{"handle":`+strconv.Itoa(opened.Return)+`,"count":65536}}`)
	agent("file-close", `{"execute":"guest-file-close","arguments":{"handle":`+strconv.Itoa(opened.Return)+`}}`)
	if c := out.Agent["file-close"]; c.Error != "" {
		t.Fatalf("file close: %s", c.Error)
	}
	agent("file-open-missing", `{"execute":"guest-file-open","arguments":{"path":"/nonexistent","mode":"r"}}`)
	if out.Agent["file-open-missing"].Error == "" {
		t.Error("opening a missing file did not fail")
	}
	if os.Getenv("DESKFARM_CAPTURE") != "" {
		b, _ := json.MarshalIndent(out, "", "  ")
		if err := os.WriteFile(filepath.Join(vmm.TestdataDir, "captures.json"), append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", filepath.Join(vmm.TestdataDir, "captures.json"))
	}
}

// A VM with user-mode networking gets its forwards on the host's loopback
// only; a VM without has no network device (TestE2ETinyLifecycle).
func TestE2EUserNetworkForward(t *testing.T) {
	m := testenv.Manager(t, "tiny")
	ctx := context.Background()
	ln, err := net.Listen("tcp", "127.0.0.1:0") // find a free port
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	vm, err := m.Create(ctx, vmm.CreateOptions{Image: "tiny", MemoryMiB: 256, VCPUs: 1,
		Network: vmm.NetworkUser, Forwards: []vmm.Forward{{GuestPort: 9222, HostPort: port}}})
	if err != nil {
		t.Fatal(err)
	}
	if vm.Network != vmm.NetworkUser || len(vm.Forwards) != 1 {
		t.Fatalf("vm %+v", vm)
	}
	if !strings.Contains(virsh(t, "dumpxml", vm.Domain), "hostfwd=tcp:127.0.0.1:"+strconv.Itoa(port)+"-:9222") {
		t.Fatal("domain lacks the forward")
	}
	// QEMU listens on the loopback address, not on every address.
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 2*time.Second)
	if err != nil {
		t.Fatalf("forwarded port not listening on 127.0.0.1: %v", err)
	}
	c.Close()
	if listensOnAny(t, port) {
		t.Fatalf("port %d listens on all addresses", port)
	}
	if err := m.Destroy(ctx, vm.ID); err != nil {
		t.Fatal(err)
	}
}

// listensOnAny reports whether a TCP socket listens on 0.0.0.0:port or [::]:port.
func listensOnAny(t *testing.T, port int) bool {
	t.Helper()
	hexPort := strings.ToUpper(strconv.FormatInt(int64(port), 16))
	for len(hexPort) < 4 {
		hexPort = "0" + hexPort
	}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, _ := os.ReadFile(f)
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fields := strings.Fields(line)
			if len(fields) < 4 || fields[3] != "0A" { // 0A: LISTEN
				continue
			}
			addr, p, _ := strings.Cut(fields[1], ":")
			if p == hexPort && strings.Trim(addr, "0") == "" {
				return true
			}
		}
	}
	return false
}
