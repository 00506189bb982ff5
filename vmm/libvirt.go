package vmm

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"
)

// hypervisor is the narrow slice of libvirt that deskfarm uses. Keeping it
// small documents exactly which libvirt calls the farm depends on.
type hypervisor interface {
	defineDomain(xml string) (libvirt.Domain, error)
	lookupDomain(name string) (libvirt.Domain, error)
	listDomains() ([]libvirt.Domain, error)
	startDomain(d libvirt.Domain, paused bool) error
	destroyDomain(d libvirt.Domain) error
	undefineDomain(d libvirt.Domain) error
	domainState(d libvirt.Domain) (libvirt.DomainState, error)
	domainMetadata(d libvirt.Domain, ns string) (string, error)
	setDomainMetadata(d libvirt.Domain, key, ns, xml string) error
	monitorHMP(d libvirt.Domain, cmd string) (string, error)
	agentCommand(d libvirt.Domain, cmd string, timeout time.Duration) (string, error)
	hostInfo() (memKiB uint64, cpus int, err error)
}

// libvirtConn is a hypervisor over go-libvirt that reconnects when libvirtd
// restarts: every call takes the current client, and a lost connection is
// re-dialled on the next call.
type libvirtConn struct {
	socket string
	log    *slog.Logger

	mu sync.Mutex
	l  *libvirt.Libvirt
}

var _ hypervisor = (*libvirtConn)(nil)

// DefaultLibvirtSocket is libvirtd's read-write socket on Debian.
const DefaultLibvirtSocket = "/run/libvirt/libvirt-sock"

func dialLibvirt(socket string, log *slog.Logger) (*libvirtConn, error) {
	c := &libvirtConn{socket: socket, log: log}
	if _, err := c.client(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *libvirtConn) client() (*libvirt.Libvirt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.l != nil && c.l.IsConnected() {
		return c.l, nil
	}
	if c.l != nil {
		c.log.Warn("libvirt connection lost, reconnecting", "op", "libvirt-connect", "socket", c.socket)
	}
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		l := libvirt.NewWithDialer(dialers.NewLocal(dialers.WithSocket(c.socket), dialers.WithLocalTimeout(5*time.Second)))
		if err = l.ConnectToURI(libvirt.QEMUSystem); err == nil {
			c.l = l
			return l, nil
		}
		// libvirtd restarting: its socket comes back within a few seconds.
		time.Sleep(250 * time.Millisecond)
	}
	return nil, fmt.Errorf("connect to libvirtd at %s: %w", c.socket, err)
}

func (c *libvirtConn) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.l == nil {
		return nil
	}
	err := c.l.Disconnect()
	c.l = nil
	return err
}

// call runs f with a connected client, retrying once on a fresh connection if
// the first attempt died with the connection (libvirtd restart).
func call[T any](c *libvirtConn, f func(l *libvirt.Libvirt) (T, error)) (T, error) {
	l, err := c.client()
	if err != nil {
		var zero T
		return zero, err
	}
	v, err := f(l)
	if err != nil && !l.IsConnected() {
		if l, err2 := c.client(); err2 == nil {
			return f(l)
		}
	}
	return v, err
}

func (c *libvirtConn) defineDomain(xml string) (libvirt.Domain, error) {
	return call(c, func(l *libvirt.Libvirt) (libvirt.Domain, error) {
		return l.DomainDefineXMLFlags(xml, libvirt.DomainDefineValidate)
	})
}

func (c *libvirtConn) lookupDomain(name string) (libvirt.Domain, error) {
	return call(c, func(l *libvirt.Libvirt) (libvirt.Domain, error) { return l.DomainLookupByName(name) })
}

func (c *libvirtConn) listDomains() ([]libvirt.Domain, error) {
	return call(c, func(l *libvirt.Libvirt) ([]libvirt.Domain, error) {
		ds, _, err := l.ConnectListAllDomains(1, libvirt.ConnectListDomainsActive|libvirt.ConnectListDomainsInactive)
		return ds, err
	})
}

func (c *libvirtConn) startDomain(d libvirt.Domain, paused bool) error {
	var flags uint32
	if paused {
		flags = uint32(libvirt.DomainStartPaused)
	}
	_, err := call(c, func(l *libvirt.Libvirt) (struct{}, error) {
		_, err := l.DomainCreateWithFlags(d, flags)
		return struct{}{}, err
	})
	return err
}

func (c *libvirtConn) destroyDomain(d libvirt.Domain) error {
	_, err := call(c, func(l *libvirt.Libvirt) (struct{}, error) {
		return struct{}{}, l.DomainDestroyFlags(d, libvirt.DomainDestroyDefault)
	})
	return err
}

func (c *libvirtConn) undefineDomain(d libvirt.Domain) error {
	_, err := call(c, func(l *libvirt.Libvirt) (struct{}, error) {
		return struct{}{}, l.DomainUndefineFlags(d, libvirt.DomainUndefineSnapshotsMetadata|libvirt.DomainUndefineNvram)
	})
	return err
}

func (c *libvirtConn) domainState(d libvirt.Domain) (libvirt.DomainState, error) {
	return call(c, func(l *libvirt.Libvirt) (libvirt.DomainState, error) {
		s, _, err := l.DomainGetState(d, 0)
		return libvirt.DomainState(s), err
	})
}

func (c *libvirtConn) domainMetadata(d libvirt.Domain, ns string) (string, error) {
	return call(c, func(l *libvirt.Libvirt) (string, error) {
		return l.DomainGetMetadata(d, int32(libvirt.DomainMetadataElement), libvirt.OptString{ns}, libvirt.DomainAffectCurrent)
	})
}

func (c *libvirtConn) setDomainMetadata(d libvirt.Domain, key, ns, xml string) error {
	_, err := call(c, func(l *libvirt.Libvirt) (struct{}, error) {
		// Live and config: a running domain's persistent definition must carry
		// the state too, or a restart of deskfarm would read a stale one.
		return struct{}{}, l.DomainSetMetadata(d, int32(libvirt.DomainMetadataElement),
			libvirt.OptString{xml}, libvirt.OptString{key}, libvirt.OptString{ns},
			libvirt.DomainAffectLive|libvirt.DomainAffectConfig)
	})
	return err
}

// qemuMonitorHMP is VIR_DOMAIN_QEMU_MONITOR_COMMAND_HMP.
const qemuMonitorHMP = 1

func (c *libvirtConn) monitorHMP(d libvirt.Domain, cmd string) (string, error) {
	return call(c, func(l *libvirt.Libvirt) (string, error) {
		return l.QEMUDomainMonitorCommand(d, cmd, qemuMonitorHMP)
	})
}

func (c *libvirtConn) agentCommand(d libvirt.Domain, cmd string, timeout time.Duration) (string, error) {
	secs := int32(timeout / time.Second)
	if secs < 1 {
		secs = 1
	}
	return call(c, func(l *libvirt.Libvirt) (string, error) {
		r, err := l.QEMUDomainAgentCommand(d, cmd, secs, 0)
		if err != nil {
			return "", err
		}
		if len(r) == 0 {
			return "", errors.New("empty agent reply")
		}
		return r[0], nil
	})
}

func (c *libvirtConn) hostInfo() (uint64, int, error) {
	type info struct {
		mem  uint64
		cpus int
	}
	i, err := call(c, func(l *libvirt.Libvirt) (info, error) {
		_, mem, cpus, _, _, _, _, _, err := l.NodeGetInfo()
		return info{mem, int(cpus)}, err
	})
	return i.mem, i.cpus, err
}

// libvirtCode returns the libvirt error number in err, or -1.
func libvirtCode(err error) libvirt.ErrorNumber {
	var e libvirt.Error
	if errors.As(err, &e) {
		return libvirt.ErrorNumber(e.Code)
	}
	return -1
}
