package osworld_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/internal/testenv"
	"github.com/deskfarm/deskfarm/osworld"
	"github.com/deskfarm/deskfarm/vmm"
)

// An osworld VM as an OSWorld harness reaches it: through its own port
// (Ports), with Chrome's and VLC's ports forwarded and a live VNC port.
func TestE2EOSWorldImageThroughPorts(t *testing.T) {
	m := testenv.Manager(t, "osworld")
	pool := desk.NewPool(m, nil)
	t.Cleanup(pool.Close)
	ports := &osworld.Ports{Farm: m, Desks: pool}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ports.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	vm, err := m.Create(ctx, vmm.CreateOptions{Image: "osworld", MemoryMiB: 2048, VCPUs: 2, Width: 1920, Height: 1080,
		Forwards: []vmm.Forward{{GuestPort: osworld.ChromiumGuestPort}, {GuestPort: osworld.VLCGuestPort}}})
	if err != nil {
		t.Fatal(err)
	}
	var addr string
	until(t, 30*time.Second, "osworld address", func() bool { addr, _ = ports.Address(vm.ID); return addr != "" })
	f := strings.Split(addr, ":")
	if len(f) != 5 || f[0] != "127.0.0.1" {
		t.Fatalf("address %q", addr)
	}
	c := osw{t: t, url: "http://127.0.0.1:" + f[1]}
	t.Logf("osworld address %s", addr)

	t.Run("failing python -c is a 200 with its returncode", func(t *testing.T) {
		c := osw{t, c.url}
		if out := c.exec("python", "-c", "import sys; sys.exit(4)"); out.ReturnCode != 4 {
			t.Fatalf("%+v", out)
		}
	})

	t.Run("a pyautogui click moves the pointer where it says", func(t *testing.T) {
		c := osw{t, c.url}
		out := c.exec("python", "-c", "import pyautogui; import time; pyautogui.FAILSAFE = False; pyautogui.click(1234, 567)")
		if out.ReturnCode != 0 {
			t.Fatalf("click: %+v", out)
		}
		if code, b := c.do("GET", "/cursor_position", "", nil); code != 200 || strings.TrimSpace(string(b)) != "[1234,567]" {
			t.Fatalf("cursor_position: %d %s", code, b)
		}
		if code, b := c.do("POST", "/screen_size", "", nil); code != 200 || strings.TrimSpace(string(b)) != `{"height":1080,"width":1920}` {
			t.Fatalf("screen_size: %d %s", code, b)
		}
	})

	t.Run("typed text reaches gnome-terminal and /terminal shows it", func(t *testing.T) {
		c := osw{t, c.url}
		if code, b := c.json("/setup/launch", map[string]any{"command": []string{"gnome-terminal"}}); code != 200 {
			t.Fatalf("launch: %d %s", code, b)
		}
		until(t, 3*time.Minute, "gnome-terminal window", func() bool {
			return strings.Contains(c.exec("wmctrl", "-lx").Output, "gnome-terminal")
		})
		c.json("/setup/activate_window", map[string]any{"window_name": "gnome-terminal-server.Gnome-terminal", "by_class": true})
		time.Sleep(2 * time.Second)
		out := c.exec("python", "-c", "import pyautogui; import time; pyautogui.FAILSAFE = False; pyautogui.write('echo osworld-e2e-$((6*7))', interval=0.02); pyautogui.press('enter')")
		if out.ReturnCode != 0 {
			t.Fatalf("typing: %+v", out)
		}
		var term struct {
			Output *string `json:"output"`
			Status string  `json:"status"`
		}
		until(t, time.Minute, "terminal text", func() bool {
			code, b := c.do("GET", "/terminal", "", nil)
			if code != 200 || json.Unmarshal(b, &term) != nil || term.Output == nil {
				return false
			}
			return strings.Contains(*term.Output, "echo osworld-e2e-$((6*7))") && strings.Contains(*term.Output, "\nosworld-e2e-42")
		})
	})

	t.Run("accessibility names the windows on screen", func(t *testing.T) {
		c := osw{t, c.url}
		code, b := c.do("GET", "/accessibility", "", nil)
		var at struct{ AT string }
		if code != 200 || json.Unmarshal(b, &at) != nil {
			t.Fatalf("accessibility: %d %.300s", code, b)
		}
		for _, want := range []string{`<desktop-frame xmlns:st="https://accessibility.ubuntu.example.org/ns/state"`,
			`<application name="gnome-terminal-server"`, `st:showing="true"`, `cp:screencoord="(`} {
			if !strings.Contains(at.AT, want) {
				t.Errorf("tree lacks %s (%d bytes)", want, len(at.AT))
			}
		}
		// Walks at once take turns on the VM's port and each answers the
		// whole tree; none leaves its relay running in the guest.
		var wg sync.WaitGroup
		for i := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				code, b := c.do("GET", "/accessibility", "", nil)
				var at struct{ AT string }
				if code != 200 || json.Unmarshal(b, &at) != nil || !strings.Contains(at.AT, `<application name="gnome-terminal-server"`) {
					t.Errorf("concurrent walk %d: %d %.300s", i, code, b)
				}
				t.Logf("concurrent walk %d answered after %s", i, time.Since(start).Round(time.Millisecond))
			}()
		}
		wg.Wait()
		if out := c.exec("pgrep", "-af", "python3 - [0-9a-f]{16}$"); out.ReturnCode != 1 {
			t.Errorf("a relay still runs in the guest after the walks: %+v", out)
		}
	})

	t.Run("chromium's devtools answer on the forwarded port", func(t *testing.T) {
		c := osw{t, c.url}
		c.json("/setup/launch", map[string]any{"command": []string{"google-chrome", "--remote-debugging-port=1337"}})
		c.json("/setup/launch", map[string]any{"command": "socat tcp-listen:9222,fork tcp:localhost:1337", "shell": true})
		u := "http://127.0.0.1:" + f[2] + "/json/version"
		until(t, 4*time.Minute, "CDP /json/version", func() bool {
			resp, err := http.Get(u)
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode == 200 && strings.Contains(string(b), `"Browser"`)
		})
		// OSWorld's get_active_url_from_accessTree finds the address bar
		// as "application[name=Google Chrome] entry[name=Address and
		// search bar]": /accessibility names Chromium so (ChromeAppNames).
		until(t, 2*time.Minute, "Chrome's address bar in /accessibility", func() bool {
			code, b := c.do("GET", "/accessibility", "", nil)
			var at struct{ AT string }
			if code != 200 || json.Unmarshal(b, &at) != nil {
				return false
			}
			i := strings.Index(at.AT, `<application name="Google Chrome"`)
			return i >= 0 && strings.Contains(at.AT[i:], `<entry name="Address and search bar"`) && !strings.Contains(at.AT, `<application name="Chromium"`)
		})
	})

	t.Run("vlc's status.xml answers on the forwarded port", func(t *testing.T) {
		c := osw{t, c.url}
		c.json("/setup/launch", map[string]any{"command": []string{"vlc"}})
		until(t, 4*time.Minute, "VLC status.xml", func() bool {
			req, _ := http.NewRequest("GET", "http://127.0.0.1:"+f[4]+"/requests/status.xml", nil)
			req.SetBasicAuth("", "password")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode == 200 && strings.Contains(string(b), "<root>")
		})
	})

	t.Run("the vnc port shows the screen", func(t *testing.T) {
		conn, err := net.DialTimeout("tcp", "127.0.0.1:"+f[3], 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(30 * time.Second))
		line, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil || line != "RFB 003.008\n" {
			t.Fatalf("greeting %q %v", line, err)
		}
		fmt.Fprint(io.Discard, line)
	})
}
