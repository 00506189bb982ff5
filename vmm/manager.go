package vmm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"
)

// BaseImage is a built, read-only guest image: what a VM boots from.
type BaseImage struct {
	Name string
	Hash string
	// Build names the build of the recipe whose disk this is (images.Image.
	// Build): a saved ready state or a fork template holds a guest's RAM
	// over that disk's bytes, and another build of the same recipe is
	// another disk. "" for a resolver that does not tell builds apart.
	Build   string
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
	// MaxSnapshots and MaxSnapshotBytes bound each VM's named snapshots
	// (SaveSnapshot): how many and how many bytes of saved RAM. Default
	// DefaultMaxSnapshots, DefaultMaxSnapshotBytes.
	MaxSnapshots     int
	MaxSnapshotBytes int64
	// MemoryOvercommit lets the guest memory of all VMs together be this
	// many times the host's (less MemoryReserveMiB) when MemoryLimitMiB is
	// 0: idle guests from one image share most pages (KSM, package ksm)
	// and give back what they free (the balloon's free page reporting), so
	// a VM costs the host much less than its guest RAM (docs/benchmarks.md,
	// "Density"). Above 1, a create is also refused while the host's
	// MemAvailable is short of MemoryReserveMiB plus the new VM's and the
	// VMs still being made's share (their memory / MemoryOvercommit): the
	// memory actually there decides, not only the promise. Default 1: no
	// overcommit.
	MemoryOvercommit float64
	// NoBalloon leaves guests without the virtio-balloon device and its
	// free page reporting (domainXML), as before issue 17: memory a guest
	// frees stays resident on the host. For benchmarks comparing the two;
	// the saved ready states of one are not loaded by the other.
	NoBalloon bool
	// Standby keeps one VM per saved ready state in use made ahead and
	// paused (standby.go): the next create from that saved state only
	// continues it. Off by default here (a library user's host runs only
	// the QEMUs it asked for); deskfarm serve turns it on.
	Standby bool
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
	if c.MaxSnapshots == 0 {
		c.MaxSnapshots = DefaultMaxSnapshots
	}
	if c.MaxSnapshotBytes == 0 {
		c.MaxSnapshotBytes = DefaultMaxSnapshotBytes
	}
	if c.MemoryOvercommit < 1 {
		c.MemoryOvercommit = 1
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
	// memAvailable reads the host's MemAvailable in MiB, for admission's
	// floor when overcommitting (hostMemAvailable; a test's fake).
	memAvailable func() (int, error)
	spares       spares // copies of saved ready states made ahead (spare.go)
	// standbys are the VMs made ahead, by saved ready state (standby.go);
	// under mu. standbyWG counts their makings and teardowns.
	standbys      map[string]*standby
	standbyClosed bool
	standbyWG     sync.WaitGroup
}

var _ Farm = (*Manager)(nil)

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
		hostMemMiB: int(memKiB / 1024), hostCPUs: cpus, log: cfg.Log, vms: map[string]*machine{}, standbys: map[string]*standby{},
		watchDone: make(chan struct{}), memAvailable: hostMemAvailable}
	m.memLimit = cfg.MemoryLimitMiB
	if m.memLimit == 0 {
		m.memLimit = int(float64(max(0, m.hostMemMiB-cfg.MemoryReserveMiB)) * cfg.MemoryOvercommit)
	}
	m.log.Info("guest memory limit", "op", "admission", "limit_mib", m.memLimit, "host_mib", m.hostMemMiB,
		"overcommit", cfg.MemoryOvercommit)
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
	pruneSaved(filepath.Join(cfg.StateDir, "saved"), cfg.Images, m.log)
	go m.watch()
	return m, nil
}

// Accel is the accelerator new VMs use ("kvm" or "tcg").
func (m *Manager) Accel() string { return m.accel }

// Health is nil while the farm is connected to libvirtd, and a
// *HypervisorDownError (ErrHypervisorDown) naming since when and why not
// while it redials: what GET /healthz answers.
func (m *Manager) Health() error { return m.hv.health() }

// Close disconnects from libvirtd. VMs keep running; a new Manager adopts
// them. The closed Manager knows no VMs any more: List is empty and every
// id is ErrNotFound, so nothing acts on a VM another Manager may own.
func (m *Manager) Close() error {
	var err error
	m.closeOnce.Do(func() {
		m.closeStandbys() // nobody's VMs: no later Manager could hand them out
		m.mu.Lock()
		for _, mc := range m.vms {
			mc.stop()
			if sess := mc.handles().session; sess != nil {
				sess.close()
			}
		}
		m.vms = map[string]*machine{}
		m.mu.Unlock()
		m.spares.close()
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
		out = append(out, mc.describe())
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// Get returns one VM.
func (m *Manager) Get(ctx context.Context, id string) (VM, error) {
	mc, err := m.lookup(id)
	if err != nil {
		return VM{}, err
	}
	return mc.describe(), nil
}
