// Package farmproc runs the real deskfarm binary as a child process, for
// the fault tests and the soak benchmark: it builds the binary, serves a
// farm on a loopback port and a state dir of the caller's, kills it or stops
// it, and counts what a farm can leak: libvirt domains and VM directories
// of that state dir, the process's fds, RSS and goroutines.
//
// Everything a test asserts goes through the HTTP API (package client), so
// the farm's internals can change under these tests. Only the final
// cleanup (Purge) reaches past the API, to remove what a failed run left.
package farmproc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/deskfarm/deskfarm/client"
	"github.com/deskfarm/deskfarm/images"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"
)

// Build compiles ./cmd/deskfarm of the module that holds the working
// directory into dir and returns the binary's path.
func Build(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	if root == "." || root == "" {
		return "", errors.New("not inside the deskfarm module (go env GOMOD is empty)")
	}
	bin := filepath.Join(dir, "deskfarm")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/deskfarm")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/deskfarm: %w: %s", err, b)
	}
	return bin, nil
}

// Config is how a farm is served.
type Config struct {
	// Bin is the deskfarm binary (Build). Required.
	Bin string
	// StateDir is the farm's --state-dir: not /tmp (QEMU must reach it),
	// and not a user's /var/lib/deskfarm. Required.
	StateDir string
	// Pools is the pool config file's YAML. Required unless Args make
	// serve take its pools from elsewhere (a cluster's DesktopPools).
	Pools string
	// Args are more serve flags, after the ones Config sets.
	Args []string
	// Env is added to serve's environment.
	Env []string
	// Prefix runs serve under another command, e.g. `ip netns exec NS`
	// for a node agent in its own network namespace.
	Prefix []string
	// Log receives the server's stdout and stderr; nil discards them.
	Log io.Writer
	// Listen is host:port; empty picks a free loopback port once, kept
	// across restarts.
	Listen string
}

// Farm is a deskfarm serve process and its client.
type Farm struct {
	cfg    Config
	cmd    *exec.Cmd
	done   chan struct{} // closed when cmd has been waited for
	Client *client.Client
	URL    string
}

// Start writes the pools file into a fresh dir next to nothing QEMU reads,
// starts `deskfarm serve` and waits until /healthz answers.
func Start(ctx context.Context, cfg Config) (*Farm, error) {
	if cfg.Bin == "" || cfg.StateDir == "" || (cfg.Pools == "" && len(cfg.Args) == 0) {
		return nil, errors.New("farmproc: Bin, StateDir and Pools (or Args) are required")
	}
	if cfg.Listen == "" {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick a port: %w", err)
		}
		cfg.Listen = l.Addr().String()
		l.Close()
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	f := &Farm{cfg: cfg, URL: "http://" + cfg.Listen}
	c, err := client.New(f.URL)
	if err != nil {
		return nil, err
	}
	f.Client = c
	return f, f.start(ctx)
}

func (f *Farm) start(ctx context.Context) error {
	if err := os.MkdirAll(f.cfg.StateDir, 0o755); err != nil {
		return err
	}
	argv := append(slices.Clone(f.cfg.Prefix), f.cfg.Bin, "serve", "--listen", f.cfg.Listen, "--state-dir", f.cfg.StateDir)
	if f.cfg.Pools != "" {
		// One file per state dir: two farms built from one binary each
		// keep their own.
		poolsFile := filepath.Join(filepath.Dir(f.cfg.Bin), "pools-"+filepath.Base(f.cfg.StateDir)+".yaml")
		if err := os.WriteFile(poolsFile, []byte(f.cfg.Pools), 0o644); err != nil {
			return err
		}
		argv = append(argv, "--pools", poolsFile)
	}
	// A test farm leaves the host's same-page merging alone unless the
	// test asks (--ksm): a farm killed with -9 cannot restore it, and a
	// host left merging after its tests is one the tests changed.
	if !slices.ContainsFunc(f.cfg.Args, func(a string) bool { return strings.HasPrefix(a, "--ksm") }) {
		argv = append(argv, "--ksm=false")
	}
	argv = append(argv, f.cfg.Args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f.cfg.Log, f.cfg.Log
	if len(f.cfg.Env) > 0 {
		cmd.Env = append(os.Environ(), f.cfg.Env...)
	}
	// Its own process group: a Ctrl-C of the test reaches the test, which
	// then stops the farm in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s serve: %w", f.cfg.Bin, err)
	}
	f.cmd, f.done = cmd, make(chan struct{})
	go func() { cmd.Wait(); close(f.done) }()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := f.Client.Health(hctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-f.done:
			return fmt.Errorf("deskfarm serve exited before answering: %v", cmd.ProcessState)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("deskfarm serve on %s did not answer /healthz in 2 minutes: %w", f.cfg.Listen, err)
		}
	}
}

// PID is the serve process's pid.
func (f *Farm) PID() int { return f.cmd.Process.Pid }

// Kill9 kills serve with SIGKILL and waits for it to be gone.
func (f *Farm) Kill9() error {
	if err := f.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-f.done
	return nil
}

// Restart starts serve again on the same state dir, port and pools.
func (f *Farm) Restart(ctx context.Context) error {
	select {
	case <-f.done:
	default:
		return errors.New("farmproc: Restart of a farm still running")
	}
	return f.start(ctx)
}

// Stop ends serve with SIGTERM (VMs keep running, as serve documents)
// and waits up to a minute, then kills it.
func (f *Farm) Stop() error {
	select {
	case <-f.done:
		return nil
	default:
	}
	f.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-f.done:
		return nil
	case <-time.After(time.Minute):
		f.cmd.Process.Kill()
		<-f.done
		return errors.New("deskfarm serve did not stop within a minute of SIGTERM; killed")
	}
}

// Exited reports whether serve has exited.
func (f *Farm) Exited() bool {
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}

// Proc is what the serve process holds, read from /proc.
type Proc struct {
	FDs      int
	RSSKiB   int
	Threads  int
	FDByKind map[string]int // "socket", "pipe", "anon_inode:[pidfd]", "file", ...
}

// ReadProc reads pid's fds and RSS.
func ReadProc(pid int) (Proc, error) {
	dir := fmt.Sprintf("/proc/%d", pid)
	ents, err := os.ReadDir(dir + "/fd")
	if err != nil {
		return Proc{}, err
	}
	p := Proc{FDs: len(ents), FDByKind: map[string]int{}}
	for _, e := range ents {
		t, err := os.Readlink(dir + "/fd/" + e.Name())
		if err != nil {
			continue
		}
		kind := "file"
		switch {
		case strings.HasPrefix(t, "socket:"):
			kind = "socket"
		case strings.HasPrefix(t, "pipe:"):
			kind = "pipe"
		case strings.HasPrefix(t, "anon_inode:"):
			kind = t
		}
		p.FDByKind[kind]++
	}
	st, err := os.ReadFile(dir + "/status")
	if err != nil {
		return Proc{}, err
	}
	sc := bufio.NewScanner(bytes.NewReader(st))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		fields := strings.Fields(v)
		if len(fields) == 0 {
			continue
		}
		n, _ := strconv.Atoi(fields[0])
		switch k {
		case "VmRSS":
			p.RSSKiB = n
		case "Threads":
			p.Threads = n
		}
	}
	return p, nil
}

// Goroutines reads the go_goroutines gauge of the server's /metrics (the
// Go collector serve registers).
func Goroutines(ctx context.Context, baseURL string) (int, error) {
	v, err := Metric(ctx, baseURL, "go_goroutines")
	return int(v), err
}

// Metric reads one unlabelled series of the server's /metrics, e.g.
// go_goroutines or go_memstats_heap_inuse_bytes.
func Metric(ctx context.Context, baseURL, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("GET /metrics: no %s series", name)
}

// Domains returns the names of the libvirt domains (running or defined)
// whose XML mentions stateDir: the domains of that farm.
func Domains(stateDir string) ([]string, error) {
	l := libvirt.NewWithDialer(dialers.NewLocal(dialers.WithSocket(vmm.DefaultLibvirtSocket), dialers.WithLocalTimeout(5*time.Second)))
	if err := l.ConnectToURI(libvirt.QEMUSystem); err != nil {
		return nil, fmt.Errorf("connect to libvirtd: %w", err)
	}
	defer l.Disconnect()
	doms, _, err := l.ConnectListAllDomains(1, 0)
	if err != nil {
		return nil, fmt.Errorf("list domains: %w", err)
	}
	needle := strings.TrimRight(stateDir, "/") + "/"
	var out []string
	for _, d := range doms {
		if !strings.HasPrefix(d.Name, vmm.DomainPrefix) {
			continue
		}
		x, err := l.DomainGetXMLDesc(d, 0)
		if err != nil {
			continue // gone in between
		}
		if strings.Contains(x, needle) {
			out = append(out, d.Name)
		}
	}
	return out, nil
}

// PausedDomains returns those of Domains(stateDir) that libvirt reports
// paused: a farm's standby VMs (vmm's standby.go, made ahead and not listed
// until a create claims them) are such domains.
func PausedDomains(stateDir string) ([]string, error) {
	names, err := Domains(stateDir)
	if err != nil {
		return nil, err
	}
	l := libvirt.NewWithDialer(dialers.NewLocal(dialers.WithSocket(vmm.DefaultLibvirtSocket), dialers.WithLocalTimeout(5*time.Second)))
	if err := l.ConnectToURI(libvirt.QEMUSystem); err != nil {
		return nil, fmt.Errorf("connect to libvirtd: %w", err)
	}
	defer l.Disconnect()
	var out []string
	for _, n := range names {
		d, err := l.DomainLookupByName(n)
		if err != nil {
			continue // gone in between
		}
		st, _, err := l.DomainGetState(d, 0)
		if err == nil && libvirt.DomainState(st) == libvirt.DomainPaused {
			out = append(out, n)
		}
	}
	return out, nil
}

// VMDirs returns the entries of stateDir/vms: one per VM's overlay,
// sockets and logs.
func VMDirs(stateDir string) ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(stateDir, "vms"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out, nil
}

// QEMUPid reads the pid libvirt recorded for a domain.
func QEMUPid(domain string) (int, error) {
	b, err := os.ReadFile(filepath.Join(vmm.DefaultQEMUPidDir, domain+".pid"))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// Purge removes every VM of stateDir once no serve runs on it: through a
// vmm.Manager on the dir (which adopts what serve left), then any domain
// or directory that still names the dir. It returns what it had to remove
// past the Manager, which a clean run leaves empty.
func Purge(ctx context.Context, stateDir string) (extra []string, err error) {
	m, err := vmm.New(ctx, vmm.Config{StateDir: stateDir, Images: vmm.StoreImages{Store: &images.Store{}}, LockWait: time.Minute})
	if err != nil {
		return nil, fmt.Errorf("open %s to purge it: %w", stateDir, err)
	}
	vms, _ := m.List(ctx)
	var errs []error
	for _, v := range vms {
		if err := m.Destroy(ctx, v.ID); err != nil {
			errs = append(errs, fmt.Errorf("destroy %s: %w", v.ID, err))
		}
	}
	m.Close()
	doms, err := Domains(stateDir)
	if err != nil {
		errs = append(errs, err)
	}
	if len(doms) > 0 {
		l := libvirt.NewWithDialer(dialers.NewLocal(dialers.WithSocket(vmm.DefaultLibvirtSocket)))
		if err := l.ConnectToURI(libvirt.QEMUSystem); err == nil {
			for _, name := range doms {
				extra = append(extra, "domain "+name)
				if d, err := l.DomainLookupByName(name); err == nil {
					l.DomainDestroy(d)
					l.DomainUndefineFlags(d, libvirt.DomainUndefineManagedSave|libvirt.DomainUndefineSnapshotsMetadata)
				}
			}
			l.Disconnect()
		}
	}
	dirs, _ := VMDirs(stateDir)
	for _, d := range dirs {
		extra = append(extra, "dir vms/"+d)
		os.RemoveAll(filepath.Join(stateDir, "vms", d))
	}
	return extra, errors.Join(errs...)
}
