package vmm

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"
)

// libvirtProxy relays unix connections to libvirtd so a test can cut them,
// as a libvirtd restart does, without disturbing libvirtd itself.
type libvirtProxy struct {
	mu    sync.Mutex
	conns []net.Conn
	// dropNext: the next bytes a client sends are dropped with its
	// connection, as if libvirtd died as the call arrived.
	dropNext bool
	// refuse: new connections are closed at once, as while libvirtd is
	// down.
	refuse bool
}

func startLibvirtProxy(t *testing.T, target string) (string, *libvirtProxy) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "libvirt-proxy.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	p := &libvirtProxy{}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			refuse := p.refuse
			p.mu.Unlock()
			if refuse {
				c.Close()
				continue
			}
			up, err := net.Dial("unix", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() {
				defer up.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						p.mu.Lock()
						drop := p.dropNext
						p.dropNext = false
						p.mu.Unlock()
						if drop {
							c.Close()
							return
						}
						if _, err := up.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
	return sock, p
}

func (p *libvirtProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// The connection to libvirtd comes back by itself after it drops: calls
// made meanwhile wait for it within their context, and a resync is
// announced so missed lifecycle events are made up for. Needs libvirtd
// (not a VM); named E2E so it runs with the VM tests.
func TestE2ELibvirtReconnect(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("DESKFARM_REQUIRE_VM") != "" || os.Getenv("CI") != "" {
			t.Fatal("needs root for libvirtd's socket")
		}
		t.Skip("needs root for libvirtd's socket")
	}
	if _, err := os.Stat(DefaultLibvirtSocket); err != nil {
		if os.Getenv("DESKFARM_REQUIRE_VM") != "" || os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	sock, proxy := startLibvirtProxy(t, DefaultLibvirtSocket)
	c, err := dialLibvirt(sock, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, _, err := c.hostInfo(ctx); err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		proxy.cut()
		// A call right after the cut waits for the redial instead of failing.
		start := time.Now()
		if _, err := c.listDomains(ctx); err != nil {
			t.Fatalf("round %d: call after the connection dropped: %v", round, err)
		}
		t.Logf("round %d: call answered %s after the cut", round, time.Since(start).Round(time.Millisecond))
		for {
			select {
			case ev := <-c.events():
				if !ev.Resync {
					continue // another farm's domain on the same libvirtd
				}
			case <-ctx.Done():
				t.Fatalf("round %d: no resync after reconnect", round)
			}
			break
		}
	}
	// Resets of two VMs watch agent events at once (libvirtd allows one
	// registration per event and connection; the second reset used to fall
	// back to pings); their subscriptions end when the connection drops.
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	var subs []<-chan agentState
	for _, name := range []string{"deskfarm-agent-a", "deskfarm-agent-b"} {
		ch, err := c.agentEvents(sctx, libvirt.Domain{Name: name})
		if err != nil {
			t.Fatalf("agent events of %s: %v", name, err)
		}
		subs = append(subs, ch)
	}
	proxy.cut()
	for i, ch := range subs {
		select {
		case _, ok := <-ch:
			if ok {
				t.Fatalf("subscription %d: an event for a domain that does not exist", i)
			}
		case <-ctx.Done():
			t.Fatalf("subscription %d not ended by the dropped connection", i)
		}
	}
	if _, err := c.listDomains(ctx); err != nil {
		t.Fatalf("call after the connection dropped: %v", err)
	}

	// A call lost with the connection is re-sent only if it is idempotent.
	proxy.mu.Lock()
	proxy.dropNext = true
	proxy.mu.Unlock()
	if _, _, err := c.hostInfo(ctx); err != nil {
		t.Fatalf("idempotent call lost with the connection: %v", err)
	}
	proxy.mu.Lock()
	proxy.dropNext = true
	proxy.mu.Unlock()
	_, err = c.defineDomain(ctx, "<domain/>")
	if err == nil || !strings.Contains(err.Error(), "not retried") {
		t.Fatalf("non-idempotent call lost with the connection: %v, want an error saying it was not retried", err)
	}

	// While libvirtd cannot be reached, Health says since when and why;
	// once it can, nil again. The call just above dropped the connection:
	// healthy again once a call has gone through on the next one.
	if _, err := c.listDomains(ctx); err != nil {
		t.Fatalf("call after the connection dropped: %v", err)
	}
	if err := c.health(); err != nil {
		t.Fatalf("health once a call went through: %v", err)
	}
	proxy.mu.Lock()
	proxy.refuse = true
	proxy.mu.Unlock()
	proxy.cut()
	var down *HypervisorDownError
	for {
		err := c.health()
		if errors.As(err, &down) && down.Err != nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("health while libvirtd refuses: %v, want a HypervisorDownError with the dial's error", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := c.health(); !errors.Is(err, ErrHypervisorDown) || !strings.Contains(err.Error(), "libvirtd at "+sock+" has not answered for") {
		t.Fatalf("health while libvirtd refuses: %v", err)
	}
	t.Logf("health while libvirtd refuses: %v", c.health())
	proxy.mu.Lock()
	proxy.refuse = false
	proxy.mu.Unlock()
	if _, err := c.listDomains(ctx); err != nil {
		t.Fatalf("call once libvirtd answers again: %v", err)
	}
	if err := c.health(); err != nil {
		t.Fatalf("health once reconnected: %v", err)
	}

	// A call whose context ends while no connection is there returns then.
	proxy.cut()
	short, cancel2 := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel2()
	time.Sleep(time.Millisecond)
	if _, err := c.listDomains(short); err == nil {
		t.Fatal("call with an expired context succeeded")
	}
}
