package kubetest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/deskfarm/deskfarm/internal/testenv"
)

// The simulated node network: one Linux bridge on the host holding
// BridgeIP, and a veth pair per NetNS into it. Every netns reaches the
// host (and a control plane started on BridgeIP) and every other netns;
// the host reaches each at its IP. Nothing is routed off the bridge.
const (
	BridgeName = "dfk-br0"
	BridgeIP   = "10.251.0.1"
	bridgeNet  = "10.251.0." // /24; .2 to .254 go to netns
	// netnsState holds the address allocations of every test process on
	// the host (one file per address, naming its owner's pid), under a
	// flock, so concurrent test binaries never hand out one address twice
	// and a killed one's netns is reclaimed.
	netnsState = "/run/deskfarm-kubetest"
)

// Netns is a network namespace joined to the bridge: what a node pod's
// network would be.
type Netns struct {
	Name string // the `ip netns` name
	IP   string // its address on the bridge
	veth string // the host end
}

// Bridge makes sure the bridge is up with BridgeIP and returns BridgeIP.
// The bridge stays (concurrent test processes share it, like libvirt's
// virbr0); netns and their veths go with their tests.
func Bridge(t testing.TB) string {
	t.Helper()
	requireRoot(t)
	unlock := lockState(t)
	defer unlock()
	if err := ensureBridge(); err != nil {
		t.Fatalf("kubetest: bridge %s: %v", BridgeName, err)
	}
	return BridgeIP
}

// NetNS creates a network namespace with the next free address on the
// bridge and lo up; t.Cleanup kills what still runs in it and removes it.
func NetNS(t testing.TB, name string) *Netns {
	t.Helper()
	requireRoot(t)
	unlock := lockState(t)
	defer unlock()
	if err := ensureBridge(); err != nil {
		t.Fatalf("kubetest: bridge %s: %v", BridgeName, err)
	}
	n, err := allocate(name)
	if err != nil {
		t.Fatalf("kubetest: netns %s: %v", name, err)
	}
	t.Cleanup(func() {
		unlock := lockState(t)
		defer unlock()
		if err := n.remove(); err != nil {
			t.Errorf("kubetest cleanup: %v", err)
		}
	})
	if err := n.create(); err != nil {
		t.Fatalf("kubetest: netns %s: %v", n.Name, err)
	}
	return n
}

// Command runs argv inside the netns (ip netns exec, which execs argv:
// the process is argv's own).
func (n *Netns) Command(ctx context.Context, argv ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.Name}, argv...)...)
}

// Addr is host:port on n's address.
func (n *Netns) Addr(port int) string { return net.JoinHostPort(n.IP, strconv.Itoa(port)) }

// allocate picks the lowest address no live test process holds (the
// caller holds the lock), reclaiming those of dead ones.
func allocate(name string) (*Netns, error) {
	base := strings.Trim(notDNS.ReplaceAllString(strings.ToLower(name), "-"), "-")
	if len(base) > 24 {
		base = base[:24]
	}
	for i := 2; i < 255; i++ {
		file := filepath.Join(netnsState, "addr-"+strconv.Itoa(i))
		if b, err := os.ReadFile(file); err == nil {
			var pid int
			var stale Netns
			if _, err := fmt.Sscan(string(b), &pid, &stale.Name, &stale.veth); err == nil && alive(pid) {
				continue
			}
			stale.IP = bridgeNet + strconv.Itoa(i)
			_ = stale.remove()
		}
		n := &Netns{Name: fmt.Sprintf("dfk-%d-%s", i, base), IP: bridgeNet + strconv.Itoa(i), veth: fmt.Sprintf("dfk%dh", i)}
		rec := fmt.Sprintf("%d %s %s\n", os.Getpid(), n.Name, n.veth)
		if err := os.WriteFile(file, []byte(rec), 0o644); err != nil {
			return nil, err
		}
		return n, nil
	}
	return nil, fmt.Errorf("all of %s0/24 taken", bridgeNet)
}

func (n *Netns) create() error {
	peer := strings.TrimSuffix(n.veth, "h") + "n"
	steps := [][]string{
		{"ip", "netns", "add", n.Name},
		{"ip", "link", "add", n.veth, "type", "veth", "peer", "name", peer, "netns", n.Name},
		{"ip", "link", "set", n.veth, "master", BridgeName, "up"},
		{"ip", "-n", n.Name, "link", "set", peer, "name", "eth0"},
		{"ip", "-n", n.Name, "addr", "add", n.IP + "/24", "dev", "eth0"},
		{"ip", "-n", n.Name, "link", "set", "eth0", "up"},
		{"ip", "-n", n.Name, "link", "set", "lo", "up"},
		{"ip", "-n", n.Name, "route", "add", "default", "via", BridgeIP},
	}
	for _, s := range steps {
		if err := run(s...); err != nil {
			return err
		}
	}
	return nil
}

// remove kills what runs in the netns, deletes it and its veth, and
// frees its address. Parts already gone are no error.
func (n *Netns) remove() error {
	if out, err := exec.Command("ip", "netns", "pids", n.Name).Output(); err == nil {
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	var errs []string
	if linkExists(n.veth) {
		if err := run("ip", "link", "del", n.veth); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if _, err := os.Stat(filepath.Join("/run/netns", n.Name)); err == nil {
		if err := run("ip", "netns", "del", n.Name); err != nil {
			errs = append(errs, err.Error())
		}
	}
	i := strings.TrimPrefix(n.IP, bridgeNet)
	if err := os.Remove(filepath.Join(netnsState, "addr-"+i)); err != nil && !os.IsNotExist(err) {
		errs = append(errs, err.Error())
	}
	if len(errs) > 0 {
		return fmt.Errorf("remove netns %s: %s", n.Name, strings.Join(errs, "; "))
	}
	return nil
}

func ensureBridge() error {
	if !linkExists(BridgeName) {
		if err := run("ip", "link", "add", BridgeName, "type", "bridge"); err != nil {
			return err
		}
	}
	out, err := exec.Command("ip", "-4", "-o", "addr", "show", "dev", BridgeName).Output()
	if err != nil {
		return fmt.Errorf("ip addr show dev %s: %w", BridgeName, err)
	}
	if !strings.Contains(string(out), " "+BridgeIP+"/") {
		if err := run("ip", "addr", "add", BridgeIP+"/24", "dev", BridgeName); err != nil {
			return err
		}
	}
	return run("ip", "link", "set", BridgeName, "up")
}

// lockState takes the host-wide netns allocation lock.
func lockState(t testing.TB) (unlock func()) {
	t.Helper()
	if err := os.MkdirAll(netnsState, 0o755); err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	f, err := os.OpenFile(filepath.Join(netnsState, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("kubetest: lock %s: %v", f.Name(), err)
	}
	return func() { f.Close() } // closing releases the flock
}

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "network namespaces need root")
	}
}

func linkExists(name string) bool {
	return exec.Command("ip", "link", "show", "dev", name).Run() == nil
}

func alive(pid int) bool {
	return pid > 0 && syscall.Kill(pid, 0) == nil
}

// run runs one ip command; its error carries the command and its output.
func run(argv ...string) error {
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
