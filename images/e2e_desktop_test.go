package images_test

import (
	"context"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/guestx"
	"github.com/deskfarm/deskfarm/internal/testenv"
	"github.com/deskfarm/deskfarm/vmm"
)

// desktopApp is one launcher of the desktop image's panel, in panel order.
type desktopApp struct {
	id    string // the launcher's desktop file
	class string // the X class of the window it opens (xdotool --class)
}

// desktopApps are the panel's launchers: the apps of Anthropic's
// computer-use reference desktop.
var desktopApps = []desktopApp{
	{"lxterminal.desktop", "lxterminal"},
	{"pcmanfm.desktop", "pcmanfm"},
	{"org.xfce.mousepad.desktop", "mousepad"},
	{"firefox-esr.desktop", "firefox-esr"},
	{"libreoffice-writer.desktop", "libreoffice-writer"},
	{"libreoffice-calc.desktop", "libreoffice-calc"},
	{"libreoffice-impress.desktop", "libreoffice-impress"},
	{"mtpaint.desktop", "mtpaint"},
	{"galculator.desktop", "galculator"},
}

// Where the panel's launchers are on the screen: the panel is the bottom
// 28 pixels (images/recipes/desktop/panel), and launcher i is centred at
// launcherX0 + i*launcherPitch, launcherY above the bottom edge (measured
// on a screenshot: the menu button takes x 0-23, each launcher 28 pixels).
// bench/settle clicks the third (the editor) at x=94.
const (
	launcherX0    = 38
	launcherPitch = 28
	launcherY     = 14
)

// checkPage is the local page Firefox opens: its title is what the window
// shows, and it fills the viewport with one colour a screenshot can find.
const checkPage = `<!doctype html><html><head><title>deskfarm check page</title></head>` +
	`<body style="margin:0;background:#ff00ff;height:100vh"></body></html>`

// TestE2EDesktopApps starts the desktop image as `make run` serves it
// (1280x800, 1024 MiB, 2 vCPUs, no network; from the saved ready state if
// an earlier test booted one, which vmm's TestE2EDesktop covers) and checks
// that a second VM starts from the saved state. It clicks each panel launcher
// as an agent would: each opens its app's window, which then closes with
// alt+F4. Firefox ESR starts without first-run pages, and shows a local
// file:// page: its title appears on the window, its colour on the screen.
// Under TCG on a loaded 2-core host LibreOffice and Firefox take a minute
// or two to start, hence the long limits.
func TestE2EDesktopApps(t *testing.T) {
	m := testenv.Manager(t, "desktop")
	ctx := context.Background()
	start := time.Now()
	vm, err := m.Create(ctx, vmm.CreateOptions{Image: "desktop", MemoryMiB: vmm.DefaultMemoryMiB, VCPUs: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("desktop ready in %s (started by %s, boot %.1fs, accel %s)", time.Since(start).Round(time.Millisecond), vm.Start, vm.BootSeconds, vm.Accel)
	// A warm pool's next VM starts from the saved ready state rather than
	// booting, the larger image notwithstanding.
	start = time.Now()
	vm2, err := m.Create(ctx, vmm.CreateOptions{Image: "desktop", MemoryMiB: vmm.DefaultMemoryMiB, VCPUs: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("second desktop ready in %s (started by %s)", time.Since(start).Round(time.Millisecond), vm2.Start)
	if vm2.Start != vmm.StartSavedState {
		t.Errorf("the second desktop VM started by %s, not from the first's saved state", vm2.Start)
	}
	if err := m.Destroy(ctx, vm2.ID); err != nil {
		t.Fatal(err)
	}

	must := func(script string) string {
		t.Helper()
		out, err := guestx.Output(ctx, m, vm.ID, guestx.Cmd{Shell: script, MergeStderr: true, Timeout: 60 * time.Second})
		if err != nil {
			t.Fatalf("%q: %v: %s", script, err, out)
		}
		return string(out)
	}
	// windows lists the visible windows of an X class.
	windows := func(class string) []string {
		t.Helper()
		// xdotool search exits 1 when nothing matches, and dies of an X
		// error (on stderr) when a window goes away while it looks: both
		// are "none seen this time".
		out, err := guestx.Run(ctx, m, vm.ID, guestx.Cmd{Shell: "xdotool search --onlyvisible --class '^" + class + "$'", Timeout: 60 * time.Second})
		if err != nil {
			t.Fatalf("xdotool search: %v", err)
		}
		return strings.Fields(string(out.Stdout))
	}
	// waitFor polls until cond holds.
	waitFor := func(what string, limit time.Duration, cond func() bool) {
		t.Helper()
		began := time.Now()
		for !cond() {
			if time.Since(began) > limit {
				saveScreen(t, m, vm.ID, what)
				t.Fatalf("%s: not within %s", what, limit)
			}
			time.Sleep(time.Second)
		}
		t.Logf("%s after %s", what, time.Since(began).Round(100*time.Millisecond))
	}
	// newWindow waits for a visible window of class that is not in before.
	newWindow := func(what, class string, before []string, retry func()) string {
		t.Helper()
		var w string
		last := time.Now()
		waitFor(what, 5*time.Minute, func() bool {
			if retry != nil && time.Since(last) > 90*time.Second {
				t.Logf("%s: none yet, again", what)
				retry()
				last = time.Now()
			}
			for _, id := range windows(class) {
				if !slices.Contains(before, id) {
					w = id
					return true
				}
			}
			return false
		})
		return w
	}
	closeWindow := func(app, w string) {
		t.Helper()
		must("xdotool windowactivate --sync " + w + " key --clearmodifiers alt+F4")
		waitFor(app+" window closed", 2*time.Minute, func() bool {
			return !slices.Contains(windows(app), w)
		})
	}

	// The panel the test clicks is the one in the image, launcher for launcher.
	panel := must("cat /home/user/.config/lxpanel/deskfarm/panels/panel")
	var ids []string
	for _, sm := range regexp.MustCompile(`(?m)^\s*id=(\S+)$`).FindAllStringSubmatch(panel, -1) {
		ids = append(ids, sm[1])
	}
	var want []string
	for _, a := range desktopApps {
		want = append(want, a.id)
	}
	if !slices.Equal(ids, want) {
		t.Fatalf("the panel's launchers are %v, want %v", ids, want)
	}

	for i, a := range desktopApps {
		before := windows(a.class)
		// As a person would: point at the launcher, then click. Once, at a
		// load of 8-10, a click that came with the pointer's arrival opened
		// nothing (the same click later did), so the pointer rests a second
		// first, and a launcher that opened nothing is clicked again.
		x, y := launcherX0+i*launcherPitch, vm.Height-launcherY
		click := func() { must(fmt.Sprintf("xdotool mousemove %d %d sleep 1 click 1", x, y)) }
		click()
		w := newWindow(a.id+" window from its launcher", a.class, before, click)
		title := strings.TrimSpace(must("xdotool getwindowname " + w))
		t.Logf("%s opened %q", a.id, title)

		if a.class == "firefox-esr" {
			checkFirefox(t, m, vm.ID, title, must, windows)
		}
		closeWindow(a.class, w)
	}
}

// checkFirefox: the launcher's window shows the home page (about:blank), no
// first-run page; then a local page opens in the running Firefox, and the
// screen shows it.
func checkFirefox(t *testing.T, m *vmm.Manager, vm, title string, must func(string) string, windows func(string) []string) {
	t.Helper()
	for _, bad := range []string{"Welcome", "Privacy", "What's New", "Firefox View", "Terms"} {
		if strings.Contains(title, bad) {
			t.Errorf("Firefox's first window is %q: a first-run page, not the blank home page", title)
		}
	}
	ctx := context.Background()
	if err := m.WriteFile(ctx, vm, "/home/user/check.html", []byte(checkPage), 0o644); err != nil {
		t.Fatal(err)
	}
	// A second window of the running Firefox, so the title is the page's.
	// It is found by that title among Firefox's new windows, not as the
	// first new one: when Firefox's first start outlasts the 90 s after
	// which newWindow clicks the launcher again (1m40s on a fresh machine,
	// CI at 858906b), that click opens a blank window, which came first
	// there, and the test waited 5 minutes on its title.
	before := windows("firefox-esr")
	must("setsid -f firefox-esr --new-window file:///home/user/check.html >/dev/null 2>&1 </dev/null")
	// Under TCG on a loaded two-core host the page's title once took more
	// than 2 minutes after the window (CI, 2026-12-01): a bound, not a speed.
	began := time.Now()
	deadline := began.Add(5 * time.Minute)
	var w string
	for {
		var seen []string
		for _, id := range windows("firefox-esr") {
			if slices.Contains(before, id) {
				continue
			}
			// A window may go between the search and this.
			name := strings.TrimSpace(must("xdotool getwindowname " + id + " 2>/dev/null || true"))
			if strings.Contains(name, "deskfarm check page") {
				w = id
				break
			}
			seen = append(seen, name)
		}
		if w != "" {
			break
		}
		if time.Now().After(deadline) {
			saveScreen(t, m, vm, "firefox-page")
			t.Fatalf("no Firefox window titled with the page's title within 5 minutes; Firefox's new windows are titled %q", seen)
		}
		time.Sleep(time.Second)
	}
	t.Logf("Firefox window of the local page after %s", time.Since(began).Round(100*time.Millisecond))
	must("xdotool windowactivate --sync " + w)
	// The page's colour fills most of the screen (the window is maximised
	// but for the panel, less Firefox's toolbars). The title can come
	// before the first paint, so poll the screen too.
	for {
		shot, err := m.Screenshot(ctx, vm)
		if err != nil {
			t.Fatal(err)
		}
		b := shot.Bounds()
		page := 0
		for y := b.Min.Y; y < b.Max.Y; y += 4 {
			for x := b.Min.X; x < b.Max.X; x += 4 {
				if c := shot.RGBAAt(x, y); c.R > 240 && c.G < 16 && c.B > 240 {
					page++
				}
			}
		}
		share := float64(page) / float64((b.Dx()/4)*(b.Dy()/4))
		if share > 0.5 {
			t.Logf("the page's colour covers %.0f%% of the screen", 100*share)
			break
		}
		if time.Now().After(deadline) {
			saveScreen(t, m, vm, "firefox-page")
			t.Fatalf("the page's #ff00ff covers %.0f%% of the screen, want more than half", 100*share)
		}
		time.Sleep(time.Second)
	}
	must("xdotool windowactivate --sync " + w + " key --clearmodifiers alt+F4")
}

// saveScreen writes the VM's screen to a PNG in the temporary directory for
// a person to look at, and logs where.
func saveScreen(t *testing.T, m *vmm.Manager, vm, name string) {
	t.Helper()
	shot, err := m.Screenshot(context.Background(), vm)
	if err != nil {
		t.Logf("screenshot: %v", err)
		return
	}
	p := filepath.Join(os.TempDir(), "deskfarm-e2e-"+strings.NewReplacer("/", "-", " ", "-").Replace(name)+".png")
	f, err := os.Create(p)
	if err != nil {
		t.Logf("screenshot: %v", err)
		return
	}
	defer f.Close()
	if err := png.Encode(f, shot); err != nil {
		t.Logf("screenshot: %v", err)
	}
	t.Logf("screen saved to %s", p)
}
