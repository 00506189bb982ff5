package osworld

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/vnc"
)

// Guest ports OSWorld's getters reach from the host, forwarded by vmm
// (CreateOptions.Forwards).
const (
	ChromiumGuestPort = 9222 // Chrome's DevTools (Playwright connect_over_cdp)
	VLCGuestPort      = 8080 // VLC's HTTP interface (status.xml)
)

// DefaultImage is the image whose VMs Ports serves by default.
const DefaultImage = "osworld"

// PortsFarm is what Ports needs from the VM layer (a vmm.Farm has it).
type PortsFarm interface {
	VMFarm
	List(ctx context.Context) ([]vmm.VM, error)
	Subscribe(ctx context.Context, name string) <-chan vmm.Event
}

// Ports gives each OSWorld VM two TCP listeners of its own, open while the
// VM is ready: one serving its OSWorld Handler, one a view-only RFB server
// of its screen (OSWorld's vnc_port: any VNC viewer shows the live run; its
// input is dropped, so a viewer cannot disturb an episode). Address reports
// them with the VM's forwards as OSWorld's
// "host:server_port:chromium_port:vnc_port:vlc_port".
//
// Set the fields, then call Run.
type Ports struct {
	Farm  PortsFarm
	Desks *desk.Pool
	// Host is the address the listeners bind: the API's --listen host;
	// default 127.0.0.1. AdvertiseHost is the host part of Address;
	// default Host, or 127.0.0.1 when Host is a wildcard.
	Host, AdvertiseHost string
	// Want picks the VMs served; default: VMs of image DefaultImage.
	Want func(vmm.VM) bool
	// Wrap wraps each VM's HTTP handler, e.g. with the API's
	// authentication, so these ports follow the same rules as the API.
	// Nil serves the handler as it is.
	Wrap func(http.Handler) http.Handler
	// Handler configures each VM's handler (VM is set per VM).
	Handler Options
	Log     *slog.Logger

	mu     sync.Mutex
	served map[string]*vmPorts
	closed bool
}

type vmPorts struct {
	vm       vmm.VM
	h        *Handler
	api      *http.Server
	apiPort  int
	vncLn    net.Listener
	vncPort  int
	cancel   context.CancelFunc
	vncConns sync.WaitGroup
}

func (p *Ports) log() *slog.Logger {
	if p.Log != nil {
		return p.Log
	}
	return slog.Default()
}

func (p *Ports) want(vm vmm.VM) bool {
	if p.Want != nil {
		return p.Want(vm)
	}
	return vm.Image == DefaultImage
}

// Run serves the ports of the wanted VMs that are ready now and of those
// that become ready, closes them when their VM dies or is destroyed, and
// closes all of them when ctx ends.
func (p *Ports) Run(ctx context.Context) error {
	events := p.Farm.Subscribe(ctx, "osworld")
	vms, err := p.Farm.List(ctx)
	if err != nil {
		return fmt.Errorf("osworld ports: list vms: %w", err)
	}
	for _, vm := range vms {
		if vm.State == vmm.StateReady && p.want(vm) {
			p.open(vm)
		}
	}
	defer p.closeAll()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				return nil
			}
			switch ev.Kind {
			case vmm.EventReady:
				if p.want(ev.VM) {
					p.open(ev.VM)
				}
			case vmm.EventDied, vmm.EventDestroyed:
				p.close(ev.VM.ID, string(ev.Kind))
			}
		}
	}
}

// Address is the VM's OSWorld address, "host:server:chromium:vnc:vlc",
// and whether the VM is served. A guest port without a forward shows as 0.
func (p *Ports) Address(vmID string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.served[vmID]
	if !ok {
		return "", false
	}
	return FormatAddress(p.advertise(), s.apiPort, forwardOf(s.vm, ChromiumGuestPort), s.vncPort, forwardOf(s.vm, VLCGuestPort)), true
}

// FormatAddress joins OSWorld's address fields: DesktopEnv splits it on
// ':' into exactly five.
func FormatAddress(host string, server, chromium, vnc, vlc int) string {
	return host + ":" + strconv.Itoa(server) + ":" + strconv.Itoa(chromium) + ":" + strconv.Itoa(vnc) + ":" + strconv.Itoa(vlc)
}

func forwardOf(vm vmm.VM, guest int) int {
	for _, f := range vm.Forwards {
		if f.GuestPort == guest {
			return f.HostPort
		}
	}
	return 0
}

func (p *Ports) host() string {
	if p.Host == "" {
		return "127.0.0.1"
	}
	return p.Host
}

func (p *Ports) advertise() string {
	if p.AdvertiseHost != "" {
		return p.AdvertiseHost
	}
	h := p.host()
	if ip := net.ParseIP(h); ip != nil && ip.IsUnspecified() {
		return "127.0.0.1"
	}
	return h
}

func (p *Ports) open(vm vmm.VM) {
	p.mu.Lock()
	if p.closed || p.served[vm.ID] != nil {
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	log := p.log().With("vm", vm.ID, "op", "osworld_ports")
	apiLn, err := net.Listen("tcp", net.JoinHostPort(p.host(), "0"))
	if err != nil {
		log.Error("osworld port", "err", err)
		return
	}
	vncLn, err := net.Listen("tcp", net.JoinHostPort(p.host(), "0"))
	if err != nil {
		apiLn.Close()
		log.Error("osworld vnc port", "err", err)
		return
	}
	opts := p.Handler
	opts.VM, opts.Network = vm.ID, vm.Network
	if opts.Log == nil {
		opts.Log = p.log()
	}
	h := NewHandler(&VMGuest{Farm: p.Farm, Desks: p.Desks, VM: vm.ID}, opts)
	var hh http.Handler = h
	if p.Wrap != nil {
		hh = p.Wrap(h)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &vmPorts{vm: vm, h: h, api: &http.Server{Handler: hh, ReadHeaderTimeout: 30 * time.Second},
		apiPort: apiLn.Addr().(*net.TCPAddr).Port, vncLn: vncLn, vncPort: vncLn.Addr().(*net.TCPAddr).Port, cancel: cancel}
	p.mu.Lock()
	if p.closed || p.served[vm.ID] != nil {
		p.mu.Unlock()
		cancel()
		apiLn.Close()
		vncLn.Close()
		return
	}
	if p.served == nil {
		p.served = map[string]*vmPorts{}
	}
	p.served[vm.ID] = s
	p.mu.Unlock()
	go s.api.Serve(apiLn)
	go p.serveVNC(ctx, s, log)
	log.Info("osworld ports open", "server_port", s.apiPort, "vnc_port", s.vncPort,
		"chromium_port", forwardOf(vm, ChromiumGuestPort), "vlc_port", forwardOf(vm, VLCGuestPort))
}

// serveVNC accepts viewers of the VM's screen: view only (Input nil).
// TODO(issue 10): pass input while the viewer holds the desk's control
// token, as the browser takeover does.
func (p *Ports) serveVNC(ctx context.Context, s *vmPorts, log *slog.Logger) {
	for {
		conn, err := s.vncLn.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				log.Warn("osworld vnc accept", "err", err)
			}
			return
		}
		s.vncConns.Add(1)
		go func() {
			defer s.vncConns.Done()
			d, err := p.Desks.Get(ctx, s.vm.ID)
			if err != nil {
				log.Warn("osworld vnc viewer: no desk", "err", err)
				conn.Close()
				return
			}
			srv := &vnc.Server{Source: d.Frames(), Name: "deskfarm " + s.vm.ID, VM: s.vm.ID, Log: log}
			if _, err := srv.Serve(ctx, conn.(*net.TCPConn)); err != nil && ctx.Err() == nil {
				log.Info("osworld vnc viewer ended", "err", err)
			}
		}()
	}
}

func (p *Ports) close(id, why string) {
	p.mu.Lock()
	s := p.served[id]
	delete(p.served, id)
	p.mu.Unlock()
	if s == nil {
		return
	}
	s.shut()
	p.log().Info("osworld ports closed", "vm", id, "op", "osworld_ports", "reason", why)
}

func (s *vmPorts) shut() {
	s.cancel()
	s.vncLn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.api.Shutdown(ctx); err != nil {
		s.api.Close()
	}
	s.h.Close()
	s.vncConns.Wait()
}

func (p *Ports) closeAll() {
	p.mu.Lock()
	p.closed = true
	all := p.served
	p.served = nil
	p.mu.Unlock()
	for _, s := range all {
		s.shut()
	}
}
