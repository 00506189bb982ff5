package vmm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/digitalocean/go-libvirt"

	"github.com/deskfarm/deskfarm/internal/fielderr"
)

// BaseImage is a built, read-only guest image: what a VM boots from.
type BaseImage struct {
	Name    string
	Hash    string
	Disk    string // qcow2, the overlay's backing file
	Kernel  string
	Initrd  string
	Cmdline string // kernel command line base; the VM adds screen options
}

// ImageResolver finds the built image for a recipe name. It returns errors
// wrapping ErrUnknownImage, ErrImageNotBuilt or ErrBrokenImage.
type ImageResolver interface {
	Resolve(name string) (BaseImage, error)
}

// Config configures a Manager. Zero values take the defaults noted.
type Config struct {
	// StateDir holds one directory per VM (overlay, sockets, console log).
	// QEMU runs as QEMUUser and must reach it, so not /tmp. Default /var/lib/deskfarm.
	StateDir string
	// Accel is auto, kvm or tcg. Default auto.
	Accel string
	// LibvirtSocket is libvirtd's unix socket. Default DefaultLibvirtSocket.
	LibvirtSocket string
	// Emulator is the QEMU binary. Default /usr/bin/qemu-system-x86_64.
	Emulator string
	// QEMUUser owns VM directories so QEMU can create its sockets. Default libvirt-qemu.
	QEMUUser string
	// BootTimeout bounds boot to session ready. Default 240 s (TCG is slow).
	BootTimeout time.Duration
	// AgentTimeout bounds waiting for the guest agent after boot. Default 90 s.
	AgentTimeout time.Duration
	// Images resolves image names. Required.
	Images ImageResolver
	// Log receives structured logs. Default slog.Default().
	Log *slog.Logger
	// LockWait is how long New waits for another deskfarm to release the
	// state dir. Default 0: fail at once with ErrStateDirBusy.
	LockWait time.Duration
	// MemoryLimitMiB is how much guest RAM all VMs together may have: a
	// create that would take the guest memory of the VMs alive (creating,
	// ready, or broken with QEMU still running) over it is refused with
	// ErrInsufficientResources. Default: the host's memory as libvirt
	// reports it less MemoryReserveMiB.
	MemoryLimitMiB int
	// QEMUPidDir holds libvirt's <domain>.pid files, for watching QEMU
	// processes directly. Default DefaultQEMUPidDir.
	QEMUPidDir string
	// MemoryReserveMiB is kept for the host (deskfarm, libvirtd, QEMU's own
	// overhead, page cache) when MemoryLimitMiB is 0. Default
	// DefaultMemoryReserveMiB.
	MemoryReserveMiB int
}

// DefaultMemoryReserveMiB is the host memory not given to guests by default.
const DefaultMemoryReserveMiB = 2048

func (c *Config) setDefaults() {
	if c.StateDir == "" {
		c.StateDir = "/var/lib/deskfarm"
	}
	c.StateDir = filepath.Clean(c.StateDir)
	if c.Accel == "" {
		c.Accel = AccelAuto
	}
	if c.LibvirtSocket == "" {
		c.LibvirtSocket = DefaultLibvirtSocket
	}
	if c.Emulator == "" {
		c.Emulator = "/usr/bin/qemu-system-x86_64"
	}
	if c.QEMUUser == "" {
		c.QEMUUser = "libvirt-qemu"
	}
	if c.BootTimeout == 0 {
		c.BootTimeout = 240 * time.Second
	}
	if c.AgentTimeout == 0 {
		c.AgentTimeout = 90 * time.Second
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.QEMUPidDir == "" {
		c.QEMUPidDir = DefaultQEMUPidDir
	}
	if c.MemoryReserveMiB == 0 {
		c.MemoryReserveMiB = DefaultMemoryReserveMiB
	}
}

// Manager runs deskfarm's VMs on one host. It implements Farm.
type Manager struct {
	cfg        Config
	hv         hypervisor
	watchDone  chan struct{} // closed when watch returns
	accel      string
	uid, gid   int
	hostMemMiB int
	hostCPUs   int
	memLimit   int    // MiB of guest RAM all VMs may have (Config.MemoryLimitMiB)
	security   string // sVirt model new domains use, "" for none (domainSpec.Security)
	log        *slog.Logger
	mu         sync.Mutex
	vms        map[string]*machine
	closeOnce  sync.Once
	lock       *os.File
	events     Bus
}

var _ Farm = (*Manager)(nil)

// machine is one VM's live record. mu is held exclusively by lifecycle
// changes (reset, destroy) and shared by calls into the guest.
type machine struct {
	// mem is the guest RAM in MiB, fixed at create; admission counts it
	// until the VM is destroyed or its QEMU is seen dead.
	mem int
	// dead is set when libvirt reported the domain stopped or undefined:
	// its memory is free again. Read under Manager.mu for admission.
	dead atomic.Bool
	// deathReason says why, once dead (under mu).
	deathReason string
	// exitReason is why QEMU is about to exit, when libvirt said so ahead
	// of the exit (a guest shutdown): a string, or nil.
	exitReason atomic.Value
	// procExited is set the moment the QEMU process watch sees it exit,
	// before libvirt says why (guestErr names such a VM dead at once).
	procExited atomic.Bool
	// stopWatch ends the QEMU process watch (watchProcess); closed once
	// the VM is gone or the Manager closes.
	stopWatch chan struct{}
	stopOnce  sync.Once

	mu      sync.RWMutex
	meta    metadata
	dom     libvirt.Domain
	agent   *agent
	mon     *monitor
	session *session // nil until connected; may be closed if QEMU died
	resets  int
	gone    bool
}

// New connects to libvirtd, chooses the accelerator and adopts the VMs a
// previous deskfarm left running; half-made VMs and orphan directories are
// removed.
func New(ctx context.Context, cfg Config) (*Manager, error) {
	cfg.setDefaults()
	if cfg.Images == nil {
		return nil, fmt.Errorf("vmm config: Images is required: %w", ErrInvalid)
	}
	accel, reason, err := detectAccel(cfg.Accel)
	if err != nil {
		return nil, err
	}
	cfg.Log.Info("accelerator chosen", "op", "accel", "accel", accel, "reason", reason)

	u, err := user.Lookup(cfg.QEMUUser)
	if err != nil {
		return nil, fmt.Errorf("look up QEMU user %s (is libvirt-daemon-system installed?): %w", cfg.QEMUUser, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := prepareStateDir(cfg.StateDir); err != nil {
		return nil, err
	}
	lock, err := lockStateDir(cfg.StateDir, cfg.LockWait)
	if err != nil {
		return nil, err
	}

	conn, err := dialLibvirt(cfg.LibvirtSocket, cfg.Log)
	if err != nil {
		lock.Close()
		return nil, err
	}
	m, err := newManager(ctx, cfg, conn, accel, uid, gid)
	if err != nil {
		conn.close()
		lock.Close()
		return nil, err
	}
	m.lock = lock
	return m, nil
}

// newManager builds a Manager on hv (libvirt, or a fake in unit tests),
// adopts what a previous deskfarm left and starts watching lifecycle events.
func newManager(ctx context.Context, cfg Config, hv hypervisor, accel string, uid, gid int) (*Manager, error) {
	memKiB, cpus, err := hv.hostInfo(ctx)
	if err != nil {
		return nil, fmt.Errorf("read host info from libvirt: %w", err)
	}
	m := &Manager{cfg: cfg, hv: hv, accel: accel, uid: uid, gid: gid,
		hostMemMiB: int(memKiB / 1024), hostCPUs: cpus, log: cfg.Log, vms: map[string]*machine{},
		watchDone: make(chan struct{})}
	m.memLimit = cfg.MemoryLimitMiB
	if m.memLimit == 0 {
		m.memLimit = max(0, m.hostMemMiB-cfg.MemoryReserveMiB)
	}
	m.log.Info("guest memory limit", "op", "admission", "limit_mib", m.memLimit, "host_mib", m.hostMemMiB)
	caps, err := hv.capabilities(ctx)
	if err != nil {
		return nil, fmt.Errorf("read libvirt capabilities: %w", err)
	}
	m.security = macModel(caps)
	if m.security != "" {
		m.log.Info("VMs confined by sVirt", "op", "security", "model", m.security,
			"detail", "each QEMU gets its own dynamic label; DAC relabelling off (deskfarm sets file owners)")
	} else {
		m.log.Warn("no AppArmor or SELinux on this host: VMs are confined only by the QEMU user and file modes", "op", "security",
			"qemu_user", cfg.QEMUUser)
	}
	if err := m.recover(ctx); err != nil {
		return nil, err
	}
	go m.watch()
	return m, nil
}

// Accel is the accelerator new VMs use ("kvm" or "tcg").
func (m *Manager) Accel() string { return m.accel }

// Close disconnects from libvirtd. VMs keep running; a new Manager adopts
// them. The closed Manager knows no VMs any more: List is empty and every
// id is ErrNotFound, so nothing acts on a VM another Manager may own.
func (m *Manager) Close() error {
	var err error
	m.closeOnce.Do(func() {
		m.mu.Lock()
		for _, mc := range m.vms {
			mc.stop()
			if mc.session != nil {
				mc.session.close()
			}
		}
		m.vms = map[string]*machine{}
		m.mu.Unlock()
		err = m.hv.close() // ends the event stream, and with it watch
		<-m.watchDone
		m.events.Close()
		if m.lock != nil {
			m.lock.Close() // releases the flock
		}
	})
	return err
}

func (m *Manager) vmDir(id string) string { return filepath.Join(m.cfg.StateDir, "vms", id) }

func newID() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// validate fills defaults into opts and checks them against the host.
func (m *Manager) validate(opts *CreateOptions) error {
	if opts.Image == "" {
		return fielderr.Newf("image", ErrInvalid, "required (e.g. \"desktop\" or \"tiny\")")
	}
	if opts.MemoryMiB == 0 {
		opts.MemoryMiB = DefaultMemoryMiB
	}
	if opts.VCPUs == 0 {
		opts.VCPUs = DefaultVCPUs
	}
	if opts.Width == 0 && opts.Height == 0 {
		opts.Width, opts.Height = DefaultWidth, DefaultHeight
	}
	switch {
	case opts.MemoryMiB < MinMemoryMiB:
		return fielderr.Newf("memory_mib", ErrInvalid, "%d is below the minimum of %d MiB", opts.MemoryMiB, MinMemoryMiB)
	case opts.MemoryMiB > m.memLimit:
		return fielderr.Newf("memory_mib", ErrInsufficientResources, "%d MiB is more than all VMs together may have (%d MiB of the host's %d)", opts.MemoryMiB, m.memLimit, m.hostMemMiB)
	case opts.VCPUs < 1 || opts.VCPUs > m.hostCPUs:
		return fielderr.Newf("vcpus", ErrInvalid, "%d is outside 1..%d (the host's CPUs)", opts.VCPUs, m.hostCPUs)
	case opts.Width < 640 || opts.Width > 3840 || opts.Height < 480 || opts.Height > 2160:
		return fielderr.Newf("width/height", ErrInvalid, "%dx%d is outside 640x480..3840x2160", opts.Width, opts.Height)
	case opts.Width%8 != 0:
		// bochs-drm shows widths that are not a multiple of 8 skewed.
		return fielderr.Newf("width", ErrInvalid, "%d is not a multiple of 8 (e.g. 1368 rather than 1366)", opts.Width)
	}
	if err := validateNetwork(opts); err != nil {
		return err
	}
	return nil
}

// validateNetwork fills in the default network and checks the forwards.
func validateNetwork(opts *CreateOptions) error {
	if opts.Network == "" {
		opts.Network = NetworkNone
	}
	switch opts.Network {
	case NetworkNone:
		if len(opts.Forwards) == 0 {
			return nil
		}
		// Forwards without network: a NIC whose user-mode stack is
		// restricted (restrict=on), so the forwards reach in and the guest
		// reaches nothing out (domainSpec.netdevArg).
	case NetworkUser:
	default:
		return fielderr.Newf("network", ErrInvalid, "%q: want %q (default) or %q", opts.Network, NetworkNone, NetworkUser)
	}
	if len(opts.Forwards) > MaxForwards {
		return fielderr.Newf("forwards", ErrInvalid, "%d forwards; at most %d", len(opts.Forwards), MaxForwards)
	}
	seen := map[int]bool{}
	for i, f := range opts.Forwards {
		field := fmt.Sprintf("forwards[%d]", i)
		if f.GuestPort < 1 || f.GuestPort > 65535 {
			return fielderr.Newf(field+".guest_port", ErrInvalid, "%d is outside 1..65535", f.GuestPort)
		}
		// Ports below 1024 would need deskfarm's privileges to stay bound by
		// QEMU. 0 asks vmm for a free one (admit).
		if f.HostPort == 0 {
			continue
		}
		if f.HostPort < 1024 || f.HostPort > 65535 {
			return fielderr.Newf(field+".host_port", ErrInvalid, "%d is outside 1024..65535", f.HostPort)
		}
		if seen[f.HostPort] {
			return fielderr.Newf(field+".host_port", ErrInvalid, "%d is forwarded twice", f.HostPort)
		}
		seen[f.HostPort] = true
	}
	return nil
}

// admit registers mc if its memory fits beside the VMs alive and its host
// ports are free of other VMs' forwards; checking and registering under one
// lock keeps concurrent creates from overcommitting.
func (m *Manager) admit(mc *machine) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.pickPortsLocked(mc); err != nil {
		return err
	}
	for i, f := range mc.meta.Forwards {
		for _, o := range m.vms {
			if o.dead.Load() {
				continue
			}
			for _, of := range o.meta.Forwards {
				if of.HostPort == f.HostPort {
					return fielderr.Newf(fmt.Sprintf("forwards[%d].host_port", i), ErrInvalid, "host port %d is forwarded to vm %s", f.HostPort, o.meta.ID)
				}
			}
		}
	}
	used := m.usedLocked()
	if used+mc.mem > m.memLimit {
		return fielderr.Newf("memory_mib", ErrInsufficientResources, "%d MiB requested but %d of the %d MiB for guests are taken by other VMs",
			mc.mem, used, m.memLimit)
	}
	m.vms[mc.meta.ID] = mc
	return nil
}

func (m *Manager) usedLocked() int {
	used := 0
	for _, o := range m.vms {
		if !o.dead.Load() {
			used += o.mem
		}
	}
	return used
}

// Capacity returns the guest memory (MiB) committed to VMs alive and the
// limit all VMs together may have (Config.MemoryLimitMiB); a create of n MiB
// succeeds only if used+n <= limit.
func (m *Manager) Capacity() (usedMiB, limitMiB int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.usedLocked(), m.memLimit
}

// snapshotReady takes the ready snapshot and, if this image and size has no
// saved ready state yet, keeps a copy of the overlay holding it for later
// VMs to start from. The guest is paused meanwhile so the copy is
// consistent; a failed copy costs later VMs a boot, not this one its create.
func (m *Manager) snapshotReady(ctx context.Context, mc *machine, tmpl string) error {
	if err := mc.mon.stop(ctx); err != nil {
		return err
	}
	err := mc.mon.saveVM(ctx, readySnapshot)
	if err == nil && !fileExists(tmpl) {
		if terr := copyFile(filepath.Join(mc.meta.Dir, "disk.qcow2"), tmpl); terr != nil {
			m.log.Warn("could not save ready state for later VMs", "vm", mc.meta.ID, "op", "snapshot", "err", terr)
		} else {
			m.log.Info("saved ready state for later VMs", "vm", mc.meta.ID, "op", "snapshot", "path", tmpl)
		}
	}
	if cerr := mc.mon.cont(ctx); err == nil {
		err = cerr
	}
	return err
}

// templatePath is where the saved ready state of VMs like opts lives. Its
// name holds everything the saved state depends on: the base image's hash
// and the virtual hardware (RAM size, vCPUs, screen, accelerator).
func (m *Manager) templatePath(img BaseImage, opts CreateOptions) string {
	hash := img.Hash
	if len(hash) > 16 {
		hash = hash[:16]
	}
	// A saved state holds the guest's devices: a VM with a NIC cannot load
	// one without, and the other way round. Forwards are host-side only.
	net := ""
	if hasNIC(opts.Network, opts.Forwards) {
		net = "-net"
	}
	name := fmt.Sprintf("%s-%s-%dm-%dc-%dx%d-%s%s.qcow2", img.Name, hash, opts.MemoryMiB, opts.VCPUs, opts.Width, opts.Height, m.accel, net)
	return filepath.Join(m.cfg.StateDir, "saved", name)
}

// File modes. The guest is hostile and other host users are not trusted
// with it: a VM's directory (overlay with the guest's disk, its sockets,
// console log) belongs to the QEMU user alone, 0700 (deskfarm is root);
// saved ready states (guest RAM) are root's, 0600 in a 0700 directory. The
// state dir and vms/ are 0711: QEMU must pass through them to its own
// directory, but nobody can list them.
const (
	stateDirMode = 0o711
	vmDirMode    = 0o700
	privateMode  = 0o600
)

// prepareStateDir creates the state dir layout and tightens the modes of
// one made by an older deskfarm.
func prepareStateDir(dir string) error {
	for _, d := range []string{dir, filepath.Join(dir, "vms")} {
		if err := os.MkdirAll(d, stateDirMode); err != nil {
			return fmt.Errorf("create state dir: %w", err)
		}
		if err := os.Chmod(d, stateDirMode); err != nil {
			return fmt.Errorf("state dir %s: %w", d, err)
		}
	}
	saved := filepath.Join(dir, "saved")
	if err := os.MkdirAll(saved, 0o700); err != nil {
		return fmt.Errorf("create state dir: %w", err)
	}
	return os.Chmod(saved, 0o700)
}

// makeVMDir creates a VM's directory for the QEMU user alone.
func makeVMDir(dir string, uid, gid int) error {
	if err := os.Mkdir(dir, vmDirMode); err != nil {
		return fmt.Errorf("create vm dir: %w", err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		return fmt.Errorf("chown vm dir %s: %w", dir, err)
	}
	return os.Chmod(dir, vmDirMode) // whatever the umask
}

// chownPrivate gives a file to the QEMU user, readable by it alone.
func chownPrivate(path string, uid, gid int) error {
	if err := os.Chown(path, uid, gid); err != nil {
		return err
	}
	return os.Chmod(path, privateMode)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// copyFile copies src to dst atomically (a temp file renamed into place).
func copyFile(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	tmp := dst + ".tmp"
	out, err := exec.Command("cp", "--sparse=always", src, tmp).CombinedOutput()
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("copy %s to %s: %w: %s", src, tmp, err, strings.TrimSpace(string(out)))
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// copyOverlay makes a VM's overlay from a saved ready state.
func (m *Manager) copyOverlay(dir, tmpl, overlay string) error {
	if err := makeVMDir(dir, m.uid, m.gid); err != nil {
		return err
	}
	if err := copyFile(tmpl, overlay); err != nil {
		return err
	}
	if err := chownPrivate(overlay, m.uid, m.gid); err != nil {
		return fmt.Errorf("overlay %s: %w", overlay, err)
	}
	return nil
}

func (m *Manager) makeOverlay(dir, base, overlay string) error {
	if _, err := os.Stat(base); err != nil {
		return fmt.Errorf("base image %s: %w: %w", base, ErrBrokenImage, err)
	}
	if err := makeVMDir(dir, m.uid, m.gid); err != nil {
		return err
	}
	out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", base, overlay).CombinedOutput()
	if err != nil {
		// qemu-img opens the backing file to size the overlay: a failure here
		// is almost always a damaged base image.
		return fmt.Errorf("qemu-img create overlay %s on %s: %w: %w: %s", overlay, base, ErrBrokenImage, err, strings.TrimSpace(string(out)))
	}
	if err := chownPrivate(overlay, m.uid, m.gid); err != nil {
		return fmt.Errorf("overlay %s: %w", overlay, err)
	}
	return nil
}

func ignoreNotRunning(err error) error {
	if libvirtCode(err) == libvirt.ErrOperationInvalid {
		return nil
	}
	return err
}

// checkAlive returns ErrDead (with the console's last lines) if QEMU is gone.
func (m *Manager) checkAlive(ctx context.Context, mc *machine, consoleLog string) error {
	st, err := m.hv.domainState(ctx, mc.dom)
	if err != nil {
		return fmt.Errorf("domain state of vm %s: %w", mc.meta.ID, err)
	}
	if st == libvirt.DomainRunning || st == libvirt.DomainPaused {
		return nil
	}
	return fmt.Errorf("vm %s: %w (libvirt state %d); console tail: %s", mc.meta.ID, ErrDead, st, tail(consoleLog, 5))
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no console log)"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

func (m *Manager) saveMeta(ctx context.Context, mc *machine) error {
	s, err := mc.meta.marshal()
	if err != nil {
		return err
	}
	if err := m.hv.setDomainMetadata(ctx, mc.dom, metadataKey, metadataNS, s); err != nil {
		return fmt.Errorf("save metadata of vm %s: %w", mc.meta.ID, err)
	}
	return nil
}

func (m *Manager) describe(mc *machine) VM {
	md := mc.meta
	return VM{ID: md.ID, Domain: DomainPrefix + md.ID, Image: md.Image, ImageHash: md.ImageHash, State: md.State,
		MemoryMiB: md.MemoryMiB, VCPUs: md.VCPUs, Width: md.Width, Height: md.Height, Accel: md.Accel,
		CreatedAt: md.Created, BootSeconds: md.BootSeconds, Start: md.Start, VNCSocket: filepath.Join(md.Dir, "vnc.sock"), Resets: mc.resets,
		Labels: md.labelMap(), Network: md.Network, Forwards: slices.Clone(md.Forwards)}
}

func (m *Manager) lookup(id string) (*machine, error) {
	m.mu.Lock()
	mc, ok := m.vms[id]
	m.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("vm %q: %w", id, ErrNotFound)
	}
	return mc, nil
}

// List returns every VM, oldest first.
func (m *Manager) List(ctx context.Context) ([]VM, error) {
	m.mu.Lock()
	mcs := make([]*machine, 0, len(m.vms))
	for _, mc := range m.vms {
		mcs = append(mcs, mc)
	}
	m.mu.Unlock()
	out := make([]VM, 0, len(mcs))
	for _, mc := range mcs {
		out = append(out, m.snapshotOf(mc))
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// snapshotOf describes mc without waiting on a lifecycle change in progress.
func (m *Manager) snapshotOf(mc *machine) VM {
	if mc.mu.TryRLock() {
		defer mc.mu.RUnlock()
		return m.describe(mc)
	}
	// Busy (creating or resetting): the fields read here are set before the
	// lock is taken, or are plain values where a stale read is harmless.
	return VM{ID: mc.meta.ID, Domain: DomainPrefix + mc.meta.ID, Image: mc.meta.Image, State: StateCreating,
		MemoryMiB: mc.meta.MemoryMiB, VCPUs: mc.meta.VCPUs, Width: mc.meta.Width, Height: mc.meta.Height,
		Accel: mc.meta.Accel, CreatedAt: mc.meta.Created}
}

// Get returns one VM.
func (m *Manager) Get(ctx context.Context, id string) (VM, error) {
	mc, err := m.lookup(id)
	if err != nil {
		return VM{}, err
	}
	return m.snapshotOf(mc), nil
}

// Destroy removes the VM's domain, overlay (and with it the ready snapshot)
// and sockets. If ctx ends or libvirt fails first, the VM stays listed
// (StateBroken) and Destroy can be called again.
func (m *Manager) Destroy(ctx context.Context, id string) error {
	mc, err := m.lookup(id)
	if err != nil {
		return err
	}
	mc.mu.Lock()
	defer mc.mu.Unlock()
	if mc.gone {
		return fmt.Errorf("vm %q: %w", id, ErrNotFound)
	}
	start := time.Now()
	if mc.session != nil {
		mc.session.close()
	}
	if err := m.teardown(ctx, mc.meta.ID, mc.meta.Dir); err != nil {
		m.markBroken(mc, "destroy failed")
		return fmt.Errorf("destroy vm %s: %w", id, err)
	}
	mc.gone = true
	mc.stop()
	m.mu.Lock()
	delete(m.vms, id)
	m.mu.Unlock()
	m.publish(EventDestroyed, mc, "destroyed")
	m.log.Info("vm destroyed", "vm", id, "op", "destroy", "duration", time.Since(start).Round(time.Millisecond))
	return nil
}

// teardown removes whatever exists of a VM: domain (running or not), its
// definition and its directory. Missing parts are not errors.
func (m *Manager) teardown(ctx context.Context, id, dir string) error {
	var errs []error
	dom, err := m.hv.lookupDomain(ctx, DomainPrefix+id)
	switch {
	case libvirt.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("look up domain: %w", err)
	default:
		if err := ignoreNotRunning(m.hv.destroyDomain(ctx, dom)); err != nil && !libvirt.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("destroy domain: %w", err))
		}
		if err := m.hv.undefineDomain(ctx, dom); err != nil && !libvirt.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("undefine domain: %w", err))
		}
	}
	if len(errs) > 0 {
		// Keep the directory while the domain may still use it.
		return errors.Join(errs...)
	}
	if dir == "" {
		dir = m.vmDir(id)
	}
	return os.RemoveAll(dir)
}

// ready returns mc if it can take guest calls, holding its read lock;
// callers must RUnlock.
func (m *Manager) ready(id, op string) (*machine, error) {
	mc, err := m.lookup(id)
	if err != nil {
		return nil, err
	}
	mc.mu.RLock()
	if mc.gone {
		mc.mu.RUnlock()
		return nil, fmt.Errorf("vm %q: %w", id, ErrNotFound)
	}
	if mc.meta.State != StateReady {
		err := m.notReadyErr(mc, op)
		mc.mu.RUnlock()
		return nil, err
	}
	return mc, nil
}

// stop ends mc's background watch.
func (mc *machine) stop() {
	mc.stopOnce.Do(func() {
		if mc.stopWatch != nil {
			close(mc.stopWatch)
		}
	})
}

// notReadyErr says why mc cannot take op: ErrNotRunning, and ErrDead too
// when its QEMU is gone. Callers hold mc.mu.
func (m *Manager) notReadyErr(mc *machine, op string) error {
	if mc.dead.Load() {
		return fmt.Errorf("%s on vm %s: %w: %w (%s)", op, mc.meta.ID, ErrNotRunning, ErrDead, mc.deathReason)
	}
	return fmt.Errorf("%s on vm %s: %w (state %s)", op, mc.meta.ID, ErrNotRunning, mc.meta.State)
}

// guestErr classifies a failed guest call: a dead QEMU is named as such.
func (m *Manager) guestErr(ctx context.Context, mc *machine, err error) error {
	if err == nil || ctx.Err() != nil {
		return err
	}
	if aerr := m.checkAlive(ctx, mc, filepath.Join(mc.meta.Dir, "console.log")); aerr != nil {
		return errors.Join(err, aerr)
	}
	// A QEMU killed mid-call breaks the agent's socket before libvirt
	// notices the exit, so the domain still reads as running: give the
	// process watch a moment to see the exit (it does within milliseconds)
	// and name the VM dead rather than blaming the agent.
	if errors.Is(err, ErrAgent) {
		t := time.NewTimer(deathSettle)
		defer t.Stop()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for !mc.procExited.Load() && !mc.dead.Load() {
			select {
			case <-ctx.Done():
				return err
			case <-t.C:
				return err
			case <-tick.C:
			}
		}
		return errors.Join(err, fmt.Errorf("vm %s: %w: qemu exited during the call; console tail: %s",
			mc.meta.ID, ErrDead, tail(filepath.Join(mc.meta.Dir, "console.log"), 5)))
	}
	return err
}

// deathSettle bounds how long a failed agent call waits to learn whether
// QEMU died under it (guestErr).
const deathSettle = 500 * time.Millisecond
