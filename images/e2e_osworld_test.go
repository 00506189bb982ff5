package images_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/atspi"
	"github.com/deskfarm/deskfarm/internal/testenv"
	"github.com/deskfarm/deskfarm/vmm"
)

// inSession runs a shell command as "user" with the X session's
// environment (display, D-Bus session bus, runtime dir), which the osworld
// image's session writes to ~/.deskfarm-session-env.
func inSession(cmd string) []string {
	return []string{"runuser", "-u", "user", "--", "env", "HOME=/home/user", "sh", "-c",
		"set -a; . /home/user/.deskfarm-session-env; set +a; cd /home/user; " + cmd}
}

// sessionShell gives a test run (a command in the session, its output and
// exit code) and must (the same, failing the test unless it exits 0).
func sessionShell(t *testing.T, m *vmm.Manager, id string) (run func(cmd string, timeout time.Duration) (string, int, error), must func(cmd string) string) {
	run = func(cmd string, timeout time.Duration) (string, int, error) {
		res, err := m.Exec(context.Background(), id, vmm.ExecRequest{Argv: inSession(cmd), Timeout: timeout})
		return string(res.Stdout) + string(res.Stderr), res.ExitCode, err
	}
	must = func(cmd string) string {
		t.Helper()
		out, code, err := run(cmd, 120*time.Second)
		if err != nil || code != 0 {
			t.Fatalf("%q: exit %d, %v: %s", cmd, code, err, out)
		}
		return out
	}
	return run, must
}

// TestE2EOSWorldImage boots the osworld image at OSWorld's 1920x1080 and
// checks, in the guest, what OSWorld's harness relies on: python is
// Python 3 with an importable pyautogui that moves the real pointer and
// types exactly into gnome-terminal; sudo -S takes "password"; the apps
// start and answer where OSWorld's getters look (Chromium's CDP through
// the google-chrome command, VLC's HTTP interface); AT-SPI sees the apps.
// It also checks the image's gaps that issue 18 closed: the tools Ubuntu
// has (unzip, zip, xz, jq, git, pip, bc), PulseAudio, the GNOME schemas
// through the session bus at /run/user/1000/bus, a time zone that is not
// UTC, Totem as the default video player, Chrome's window class, and
// Thunderbird starting on its mail window rather than the account setup.
// Under TCG on a loaded 2-core host Chromium and LibreOffice take 1-2
// minutes to start, hence the long limits.
func TestE2EOSWorldImage(t *testing.T) {
	m := testenv.Manager(t, "osworld")
	ctx := context.Background()
	start := time.Now()
	vm, err := m.Create(ctx, vmm.CreateOptions{Image: "osworld", MemoryMiB: 2048, VCPUs: 2, Width: 1920, Height: 1080, Boot: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("osworld ready in %s (boot %.1fs, accel %s)", time.Since(start).Round(time.Millisecond), vm.BootSeconds, vm.Accel)

	run, must := sessionShell(t, m, vm.ID)
	// waitFor polls cmd until its output contains want.
	waitFor := func(what, cmd, want string, limit time.Duration) {
		t.Helper()
		began := time.Now()
		for {
			// A slow guest may time a poll out; only the limit fails.
			out, _, err := run(cmd, 60*time.Second)
			if err != nil {
				out = err.Error()
			}
			if strings.Contains(out, want) {
				t.Logf("%s after %s", what, time.Since(began).Round(100*time.Millisecond))
				return
			}
			if time.Since(began) > limit {
				t.Fatalf("%s: %q never showed %q in %s; last output: %s", what, cmd, want, limit, out)
			}
			time.Sleep(time.Second)
		}
	}

	shot, err := m.Screenshot(ctx, vm.ID)
	if err != nil {
		t.Fatal(err)
	}
	if b := shot.Bounds(); b.Dx() != 1920 || b.Dy() != 1080 {
		t.Fatalf("screen is %v, want 1920x1080", b)
	}

	// OSWorld's action prefix, exactly.
	out := must(`python -c "import pyautogui; import time; pyautogui.FAILSAFE = False; import sys; print(sys.version_info[0], tuple(pyautogui.size())); pyautogui.moveTo(123, 456, 0.3, pyautogui.easeInOutQuad)"`)
	if !strings.Contains(out, "3 (1920, 1080)") {
		t.Fatalf("python/pyautogui: %s", out)
	}
	if out := must("xdotool getmouselocation"); !strings.Contains(out, "x:123 y:456 ") {
		t.Fatalf("pointer after pyautogui.moveTo(123, 456): %s", out)
	}
	if out := must("echo password | sudo -S -k id -u 2>/dev/null"); strings.TrimSpace(out) != "0" {
		t.Fatalf("sudo -S: %s", out)
	}

	// The tools Ubuntu's desktop has and OSWorld's tasks call.
	for _, cmd := range []string{"unzip -v", "zip -v", "xz --version", "jq --version", "git --version", "pip --version", "echo 6*7 | bc"} {
		out := must(cmd)
		if cmd == "echo 6*7 | bc" && strings.TrimSpace(out) != "42" {
			t.Fatalf("%s: %s", cmd, out)
		}
	}
	// PulseAudio runs in the session, on a null sink.
	waitFor("PulseAudio", "pactl info", "Server Name: pulseaudio", 60*time.Second)
	// Below the max, read as os/28cc3b7e's grader reads it.
	if out := must("pactl list sinks | grep '^[[:space:]]Volume:' | head -n 1 | awk '{print $5}' | sed 's/%//g'"); strings.TrimSpace(out) != "40" {
		t.Fatalf("the sink's volume is %q%%, want 40 (100 is the answer of OSWorld's max-volume task)", strings.TrimSpace(out))
	}
	// The GNOME schemas that graders read, through the session bus at
	// Ubuntu's path, which OSWorld's task steps name: a value set there is
	// the one read back.
	ubuntuBus := "DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/1000/bus "
	must("gsettings get org.gnome.shell favorite-apps")
	must("gsettings get org.gnome.desktop.a11y.magnifier mag-factor")
	if out := must("gsettings get org.gnome.desktop.interface text-scaling-factor"); strings.TrimSpace(out) != "1.0" {
		t.Fatalf("text-scaling-factor is %q, want Ubuntu's 1.0", out)
	}
	must(ubuntuBus + "gsettings set org.gnome.shell favorite-apps \"['google-chrome.desktop', 'thunderbird.desktop']\"")
	if out := must(ubuntuBus + "gsettings get org.gnome.shell favorite-apps"); strings.TrimSpace(out) != "['google-chrome.desktop', 'thunderbird.desktop']" {
		t.Fatalf("favorite-apps set through /run/user/1000/bus reads back %q", out)
	}
	must("gsettings reset org.gnome.shell favorite-apps")
	// Defaults that a task's grader reads must not already be the answer:
	// the time zone is not UTC (is_utc_0 reads timedatectl's fourth line)
	// and VLC is not the default video player (xdg-mime, as
	// get_default_video_player asks).
	if out := must("date +%Z; cat /etc/timezone"); strings.Contains(out, "UTC") || !strings.Contains(out, "America/Los_Angeles") {
		t.Fatalf("time zone: %s", out)
	}
	tdc := must("timedatectl status")
	if lines := strings.Split(tdc, "\n"); len(lines) < 4 || !strings.Contains(lines[3], "Time zone: America/Los_Angeles") || strings.HasSuffix(strings.TrimSpace(lines[3]), "+0000)") {
		t.Fatalf("timedatectl status, as OSWorld's is_utc_0 reads it:\n%s", tdc)
	}
	if out := strings.TrimSpace(must("xdg-mime query default video/mp4")); out != "org.gnome.Totem.desktop" {
		t.Fatalf("default video player is %q, want Totem (Ubuntu's)", out)
	}

	// gnome-terminal through D-Bus activation in the dbus-launch session,
	// then pyautogui typing into it, Unicode included.
	must("gnome-terminal >/dev/null 2>&1")
	waitFor("gnome-terminal window", "wmctrl -lx", "gnome-terminal-server", 90*time.Second)
	text := "osworld Grüße café — ✓ 日本語"
	must(`python -c "import pyautogui; pyautogui.FAILSAFE = False; pyautogui.write('echo ` + text + ` > /tmp/typed.txt\n')"`)
	waitFor("typed text", "cat /tmp/typed.txt", text, 30*time.Second)
	if got := strings.TrimSpace(must("cat /tmp/typed.txt")); got != text {
		t.Fatalf("gnome-terminal got %q, typed %q", got, text)
	}
	waitFor("AT-SPI tree", `python -c "import pyatspi; print([a.name for a in pyatspi.Registry.getDesktop(0)])"`, "gnome-terminal-server", 120*time.Second)

	// Chromium as OSWorld starts Chrome, with CDP.
	must("setsid -f google-chrome --remote-debugging-port=1337 >/dev/null 2>&1 </dev/null")
	waitFor("Chromium CDP", `python -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:1337/json/version', timeout=5).read().decode())"`, `"Browser"`, 300*time.Second)
	if out := must("ls /home/user/.config/google-chrome"); !strings.Contains(out, "Default") {
		t.Fatalf("Chromium's profile is not where OSWorld's getters read it: %s", out)
	}

	// Chrome's preference graders, read as OSWorld's getters read the
	// fresh profile, must not already give the answers of the tasks that
	// only launch Chrome: Do Not Track on, a default font size above 16,
	// the profile named "Thomas". Not "delete data on exit": its getter
	// asks only whether profile.default_content_setting_values exists, and
	// Chromium 13x writes that key into every fresh profile itself
	// (has_migrated_local_network_access, seen with Debian's chromium on
	// the host; present in this guest's fresh profile), so that task passes untouched
	// on any current Chromium or Chrome (docs/osworld-image.md).
	prefs := `python -c "
import json
d = json.load(open('/home/user/.config/google-chrome/Default/Preferences'))
print('dnt', bool(d.get('enable_do_not_track', {})))
print('delete', d.get('profile', {}).get('default_content_setting_values') is not None)
print('font', d.get('webkit', {}).get('webprefs', {}).get('default_font_size', 16))
print('name', d.get('profile', {}).get('name'))
print('read')"`
	waitFor("Chromium's Preferences", prefs, "read", 120*time.Second)
	if out := must(prefs); !strings.Contains(out, "dnt False\n") || !strings.Contains(out, "font 16\n") || strings.Contains(out, "name Thomas") {
		t.Fatalf("a fresh profile's Preferences answer a task: %s", out)
	}

	// VLC's web interface, as OSWorld's vlc_playing_info reads it.
	must("setsid -f vlc >/dev/null 2>&1 </dev/null")
	waitFor("VLC status.xml", `python -c "
import base64, urllib.request
r = urllib.request.Request('http://127.0.0.1:8080/requests/status.xml', headers={'Authorization': 'Basic ' + base64.b64encode(b':password').decode()})
print(urllib.request.urlopen(r, timeout=5).read().decode())"`, "<state>", 180*time.Second)

	// LibreOffice Calc opens a window, the pointer outside it (on the
	// panel): the clicks by its tree below check where it says its cells
	// are (deskfarm-office-origin).
	must("xdotool mousemove 1700 1070 && setsid -f libreoffice --calc >/dev/null 2>&1 </dev/null")
	waitFor("LibreOffice Calc window", "wmctrl -l", "LibreOffice Calc", 300*time.Second)

	// Chromium's window carries Chrome's class and Chrome's title (the
	// image's locale pack, chrome-names.py), as tasks that activate or
	// match "Google Chrome" by title need, and google-chrome.desktop names
	// the wrapper.
	if out := must("wmctrl -lx"); !strings.Contains(out, ".Google-chrome ") {
		t.Fatalf("no window of class Google-chrome:\n%s", out)
	}
	waitFor("a window titled \"… - Google Chrome\"", "wmctrl -l", " - Google Chrome", 60*time.Second)
	if out := must("wmctrl -l"); strings.Contains(out, "Chromium") {
		t.Fatalf("a window title still says Chromium:\n%s", out)
	}
	if out := must("grep -x 'Exec=/usr/local/bin/google-chrome %U' /usr/share/applications/google-chrome.desktop"); out == "" {
		t.Fatal("google-chrome.desktop does not start the wrapper")
	}

	// Thunderbird opens its mail window, not the account setup that a
	// profile without accounts gets on its first run. Since Thunderbird 128
	// the setup (the "Account Hub") is a modal inside the mail window, so
	// the window title does not show it; its accessibility tree does.
	must("setsid -f thunderbird >/dev/null 2>&1 </dev/null")
	waitFor("Thunderbird window", "wmctrl -l", "Mozilla Thunderbird", 300*time.Second)
	// The trees are read with deskfarm's walk (package atspi, what
	// /accessibility answers): seconds a look, where a pyatspi walk in the
	// guest took most of a minute.
	type node struct {
		Role, Title string
		Children    []*node
	}
	tree := func() (*node, error) {
		out, err := atspi.Read(ctx, m, vm.ID, atspi.ModeCua)
		if err != nil {
			return nil, err
		}
		var root node
		return &root, json.Unmarshal(out, &root)
	}
	// hub looks in Thunderbird's frame for the first-run account setup: a
	// dialog, or the hub's own names.
	hub := func(root *node) (found string, frames int) {
		var walk func(n *node, depth int) string
		walk = func(n *node, depth int) string {
			if n.Role == "dialog" || strings.Contains(n.Title, "Account Hub") || strings.Contains(n.Title, "Set up your existing email") {
				return n.Role + " " + n.Title
			}
			for _, c := range n.Children {
				if depth < 14 {
					if hit := walk(c, depth+1); hit != "" {
						return hit
					}
				}
			}
			return ""
		}
		for _, app := range root.Children {
			if !strings.Contains(strings.ToLower(app.Title), "thunderbird") {
				continue
			}
			for _, f := range app.Children {
				if strings.Contains(f.Title, "Thunderbird") {
					frames++
					if hit := walk(f, 0); hit != "" {
						return hit, frames
					}
				}
			}
		}
		return "", frames
	}
	until := func(what string, limit time.Duration, ok func(*node) bool) {
		t.Helper()
		deadline := time.Now().Add(limit)
		for {
			root, err := tree()
			if err == nil && ok(root) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %s (last walk: %v)", what, limit, err)
			}
			time.Sleep(2 * time.Second)
		}
	}
	until("Thunderbird in the AT-SPI tree", 180*time.Second, func(r *node) bool { _, n := hub(r); return n > 0 })
	// The hub opens once the window has loaded; look a few times more.
	for i := 0; i < 5; i++ {
		root, err := tree()
		if err != nil {
			t.Fatalf("accessibility walk: %v", err)
		}
		if hit, _ := hub(root); hit != "" {
			t.Fatalf("Thunderbird opened its first-run account setup: %s", hit)
		}
		time.Sleep(3 * time.Second)
	}
	if out := must("wmctrl -l"); strings.Contains(out, "Account Setup") {
		t.Fatalf("Thunderbird opened its account setup window:\n%s", out)
	}

	// Chromium and VLC (Qt) publish their trees too: accessibility is on
	// for the whole session, not only for GTK.
	// The page's own tree too (the wrapper's --force-renderer-accessibility),
	// not only the browser's window: OSWorld's a11y_tree observations read
	// the page.
	must(`printf '<html><title>deskfarm a11y page</title><body><h1>Deskfarm page heading</h1><a href="#x">deskfarm page link</a></body></html>' >/tmp/a11y.html`)
	must("setsid -f google-chrome file:///tmp/a11y.html >/dev/null 2>&1 </dev/null")
	// A covered window's page is not in Chromium's tree (its document is
	// 0x0): raise the page's window on each look.
	until("the page's heading in Chromium's tree", 180*time.Second, func(r *node) bool {
		_, _, _ = run("wmctrl -a 'deskfarm a11y page'", 30*time.Second)
		var find func(n *node) bool
		find = func(n *node) bool {
			if n.Title == "Deskfarm page heading" || n.Title == "deskfarm page link" {
				return true
			}
			for _, c := range n.Children {
				if find(c) {
					return true
				}
			}
			return false
		}
		return find(r)
	})
	for _, app := range []string{"Chromium", "vlc"} {
		until(app+" in the AT-SPI tree", 120*time.Second, func(r *node) bool {
			for _, a := range r.Children {
				if a.Role == "application" && a.Title == app {
					return true
				}
			}
			return false
		})
	}

	// OSWorld's XML of the whole desktop (a Calc sheet on screen, Chromium,
	// Thunderbird, VLC, the terminal: a walk of tens of seconds under
	// TCG): every cell on screen carries its box and its value, as
	// OSWorld's server writes them. Cells are objects LibreOffice keeps
	// only while leased (15 s from the reference): a walk that asked their
	// details late lost some (package atspi, walk.go).
	must("wmctrl -a 'LibreOffice Calc'")
	began := time.Now()
	xmlTree, st, err := atspi.ReadStats(ctx, m, vm.ID, atspi.ModeOSWorld, atspi.Options{})
	if err != nil {
		t.Fatalf("OSWorld's accessibility tree: %v", err)
	}
	cells, bare := 0, []string{}
	for _, tag := range regexp.MustCompile(`<table-cell [^>]*>`).FindAllString(string(xmlTree), -1) {
		if !strings.Contains(tag, `st:showing="true"`) || !strings.Contains(tag, `st:visible="true"`) {
			continue
		}
		cells++
		if !strings.Contains(tag, "cp:screencoord=") || !strings.Contains(tag, "val:value=") {
			bare = append(bare, tag)
		}
	}
	t.Logf("OSWorld's tree in %s: %d bytes, %d cells on screen", time.Since(began).Round(time.Millisecond), len(xmlTree), cells)
	if cells < 100 || len(bare) > 0 {
		t.Fatalf("%d cells on screen (want Calc's sheet, 100 or more), %d without their box or value, e.g. %v", cells, len(bare), bare[:min(len(bare), 3)])
	}

	// A click where the tree has cell B3, as an agent that acts by the tree
	// makes it, selects B3: LibreOffice told its boxes 25 px high until the
	// pointer moved inside its window (docs/benchmarks.md), which put such
	// a click on B2. The walk below (a fresh one) tells the cell focused.
	bx, by, bw, bh := cellBox(t, xmlTree, "B3")
	must(fmt.Sprintf("xdotool mousemove %d %d click 1 && sleep 1", bx+bw/2, by+bh/2))

	// What the walk derives of LibreOffice's objects from its classes
	// (atspi's menus.go and calc.go: the menu objects' values and
	// attributes, the cells' names) is what each answers when asked.
	asked, ast, err := atspi.ReadStats(ctx, m, vm.ID, atspi.ModeOSWorld, atspi.Options{AskDerived: true})
	if err != nil {
		t.Fatalf("OSWorld's accessibility tree, every object asked: %v", err)
	}
	got, want := libreOfficeFacts(xmlTree), libreOfficeFacts(asked)
	if len(want) < cells+100 || strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("LibreOffice's menu values and attributes and cell names, derived (%d) and asked (%d), differ or are too few:\n%s", len(got), len(want), firstDiff(got, want))
	}
	t.Logf("LibreOffice's derived facts: %d, the same when asked; its calls deriving %d, asking %d", len(got), appCalls(st, "soffice"), appCalls(ast, "soffice"))
	if f := focusedCells(asked); len(f) != 1 || f[0] != "B3" {
		t.Fatalf("after a click at B3's centre as the tree told it (%d,%d), the cells focused are %v, want B3: LibreOffice's boxes are off", bx+bw/2, by+bh/2, f)
	}
	if d, a := appCalls(st, "soffice"), appCalls(ast, "soffice"); a-d < cells {
		t.Fatalf("LibreOffice was asked %d calls deriving and %d asking: want at least a call per cell (%d) fewer", d, a, cells)
	}

	// On a kept session (atspi's keep.go) the walk after an agent's step
	// in the terminal asks the applications the step left alone only
	// whether they changed, and gives what a fresh walk gives. The step
	// takes the focus from Calc's cell, which LibreOffice tells under a
	// path no walk saw: the cell is found by its index and mended.
	if _, _, err := atspi.ReadStats(ctx, m, vm.ID, atspi.ModeOSWorld, atspi.Options{}); err != nil {
		t.Fatalf("the first walk of a kept session: %v", err)
	}
	must("wmctrl -x -a gnome-terminal && sleep 0.5 && xdotool type --delay 30 'echo kept' && xdotool key Return && sleep 2")
	began = time.Now()
	keptTree, kst, err := atspi.ReadStats(ctx, m, vm.ID, atspi.ModeOSWorld, atspi.Options{})
	if err != nil {
		t.Fatalf("a kept walk: %v", err)
	}
	took := time.Since(began)
	freshTree, _, err := atspi.ReadStats(ctx, m, vm.ID, atspi.ModeOSWorld, atspi.Options{Fresh: true})
	if err != nil {
		t.Fatalf("a fresh walk: %v", err)
	}
	var keptApps, unkept []string
	for _, a := range kst.PerApp {
		if a.Kept {
			keptApps = append(keptApps, a.Name)
		} else {
			unkept = append(unkept, fmt.Sprintf("%s (%d calls; %q)", a.Name, a.Calls, a.Unkept))
		}
	}
	t.Logf("walked whole after a step in the terminal: %v", unkept)
	for _, a := range kst.PerApp {
		// What a caller reading the stats sees of why.
		if a.Name == "Thunderbird" && !strings.Contains(a.Unkept, "not vetted") {
			t.Errorf("Thunderbird walked whole with the reason %q, want one saying its web engine is not vetted", a.Unkept)
		}
	}
	if len(keptApps) < 4 {
		t.Errorf("after a step in the terminal, the applications kept were %v; want four or more (Thunderbird, a web engine, is walked whole)", keptApps)
	}
	// The applications kept are compared: those walked whole may change
	// between two walks on their own (Thunderbird renamed a button's
	// action between two fresh walks in CI at e73ca33), and so does the
	// memory figure Chromium writes in its tabs' names (a kept tree asks
	// those names again, but the fresh walk comes later).
	for _, name := range keptApps {
		k, f := appXML(keptTree, name), appXML(freshTree, name)
		k, f = tabMemory.ReplaceAllString(k, ""), tabMemory.ReplaceAllString(f, "")
		if k == "" || k != f {
			t.Fatalf("%s's kept tree differs from a fresh walk's: %s", name, firstDiff(strings.Split(k, "<"), strings.Split(f, "<")))
		}
	}
	t.Logf("a kept walk after a step in the terminal: %s, %d calls, %v kept, each the same as in a fresh walk", took.Round(time.Millisecond), kst.Calls, keptApps)

	// Steps that could move a sheet's cells with no event: the pointer
	// moving over Calc (LibreOffice took its position from the pointer's
	// first motion inside its window, measured A1 at y 159, then 184,
	// before the image's deskfarm-office-origin gave it that motion), and
	// a column widened by a drag of its header's edge, as an agent does it
	// in a Calc task, which moves every cell right of it. After each, the
	// kept tree has the cells where a fresh walk finds them, LibreOffice
	// kept.
	keptAfter := func(step, cmd string) []byte {
		t.Helper()
		// A fresh walk ends the kept session: a kept walk begins one.
		if _, _, err := atspi.ReadStats(ctx, m, vm.ID, atspi.ModeOSWorld, atspi.Options{}); err != nil {
			t.Fatalf("the first walk of a kept session: %v", err)
		}
		must(cmd)
		began := time.Now()
		kept, kst, err := atspi.ReadStats(ctx, m, vm.ID, atspi.ModeOSWorld, atspi.Options{})
		if err != nil {
			t.Fatalf("a kept walk after %s: %v", step, err)
		}
		took := time.Since(began)
		fresh, _, err := atspi.ReadStats(ctx, m, vm.ID, atspi.ModeOSWorld, atspi.Options{Fresh: true})
		if err != nil {
			t.Fatalf("a fresh walk after %s: %v", step, err)
		}
		for _, a := range kst.PerApp {
			if a.Name == "soffice" && !a.Kept {
				t.Errorf("LibreOffice walked whole after %s (%d calls; %q), want it kept", step, a.Calls, a.Unkept)
			}
		}
		if k, f := appXML(kept, "soffice"), appXML(fresh, "soffice"); k != f {
			t.Fatalf("LibreOffice's kept tree after %s differs from a fresh walk's: %s", step, firstDiff(strings.Split(k, "<"), strings.Split(f, "<")))
		}
		t.Logf("a kept walk after %s: %s, %d calls (LibreOffice %d), the same as a fresh walk", step, took.Round(time.Millisecond), kst.Calls, appCalls(kst, "soffice"))
		return fresh
	}
	freshTree = keptAfter("the pointer moved over Calc", "wmctrl -a 'LibreOffice Calc' && sleep 1 && xdotool mousemove 900 600 && sleep 2")
	x, y, w, _ := cellBox(t, freshTree, "A1")
	edge, header := x+w-1, y-8
	freshTree = keptAfter("a column widened", fmt.Sprintf("xdotool mousemove %d %d && sleep 0.3 && xdotool mousedown 1 mousemove %d %d && sleep 0.3 && xdotool mousemove %d %d && sleep 0.3 && xdotool mouseup 1 && sleep 2",
		edge, header, edge+30, header, edge+80, header))
	if _, _, w2, _ := cellBox(t, freshTree, "A1"); w2 < w+40 {
		t.Fatalf("A1 is %d wide after its column's edge was dragged 80 px right, was %d: the step did not widen it", w2, w)
	}

	if shot, err = m.Screenshot(ctx, vm.ID); err != nil {
		t.Fatal(err)
	}
	if err := m.Destroy(ctx, vm.ID); err != nil {
		t.Fatal(err)
	}
}

// cellBox is the screen box of the Calc cell named name in OSWorld's XML.
func cellBox(t *testing.T, tree []byte, name string) (x, y, w, h int) {
	t.Helper()
	m := regexp.MustCompile(`<table-cell name="` + name + `"[^>]*cp:screencoord="\((-?[0-9]+), (-?[0-9]+)\)" cp:size="\(([0-9]+), ([0-9]+)\)"`).FindStringSubmatch(string(tree))
	if m == nil {
		t.Fatalf("no cell %s with a box in the tree", name)
	}
	v := make([]int, 4)
	for i := range v {
		v[i], _ = strconv.Atoi(m[i+1])
	}
	return v[0], v[1], v[2], v[3]
}

// focusedCells names the Calc cells OSWorld's XML tells focused.
func focusedCells(tree []byte) []string {
	var out []string
	for _, m := range regexp.MustCompile(`<table-cell name="([A-Z]+[0-9]+)"[^>]*>`).FindAllStringSubmatch(string(tree), -1) {
		if strings.Contains(m[0], `st:focused="true"`) {
			out = append(out, m[1])
		}
	}
	return out
}

// libreOfficeFacts lists, from OSWorld's XML, what atspi derives of
// LibreOffice's objects: each menu object's role, name, value and
// attributes, and each cell's name, in tree order.
func libreOfficeFacts(tree []byte) []string {
	s := string(tree)
	i := strings.Index(s, `<application name="soffice"`)
	if i < 0 {
		return nil
	}
	s = s[i+1:]
	if j := strings.Index(s, "<application "); j >= 0 {
		s = s[:j]
	}
	attr := regexp.MustCompile(`(name|val:value|attr:[^=]*)="[^"]*"`)
	var out []string
	for _, tag := range regexp.MustCompile(`<(menu-item|check-menu-item|radio-menu-item|menu|table-cell) [^>]*>`).FindAllString(s, -1) {
		role := tag[1:strings.IndexByte(tag, ' ')]
		if role == "table-cell" {
			out = append(out, role+" "+attr.FindString(tag))
			continue
		}
		out = append(out, role+" "+strings.Join(attr.FindAllString(tag, -1), " "))
	}
	return out
}

// firstDiff shows where two lists first differ.
func firstDiff(got, want []string) string {
	for i := range max(len(got), len(want)) {
		g, w := "(none)", "(none)"
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			return fmt.Sprintf("at %d: derived %s, asked %s", i, g, w)
		}
	}
	return "the same"
}

// tabMemory is the memory figure in Chromium's tabs' names ("Page -
// Memory usage - 24.5 MB").
var tabMemory = regexp.MustCompile(` - Memory usage - [0-9.]+ [KMG]B|name="[0-9]{1,2}:[0-9]{2}"|>[0-9]{1,2}:[0-9]{2}<`)

// appXML is the application named name's part of OSWorld's XML, "" when
// it has none.
func appXML(tree []byte, name string) string {
	s := string(tree)
	i := strings.Index(s, `<application name="`+name+`"`)
	if i < 0 {
		return ""
	}
	j := strings.Index(s[i:], "</application>")
	if j < 0 {
		return s[i:]
	}
	return s[i : i+j]
}

// appCalls is how many calls the walk made to the application named name.
func appCalls(st atspi.Stats, name string) int {
	for _, a := range st.PerApp {
		if a.Name == name {
			return a.Calls
		}
	}
	return 0
}

// TestE2EOSWorldVSCode starts VS Code in the osworld image as OSWorld's
// vs_code tasks do (launch "code", then activate_window "Visual Studio
// Code") and checks what their graders read: the window is there under
// that title with VS Code's class, a setting changed in the workbench lands
// in ~/.config/Code/User/settings.json, and the CLI answers VS Code's
// version and an (empty) extension list. The image's code is code-server
// from npm on Debian's Node (images/recipes/osworld/code-server.sh).
func TestE2EOSWorldVSCode(t *testing.T) {
	m := testenv.Manager(t, "osworld")
	ctx := context.Background()
	start := time.Now()
	vm, err := m.Create(ctx, vmm.CreateOptions{Image: "osworld", MemoryMiB: 2048, VCPUs: 2, Width: 1920, Height: 1080})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Destroy(ctx, vm.ID) }()
	t.Logf("osworld ready in %s", time.Since(start).Round(time.Millisecond))
	run, must := sessionShell(t, m, vm.ID)
	if out := must("code --version"); !strings.HasPrefix(out, "1.87.0\n") {
		t.Fatalf("code --version: %q, want VS Code's 1.87.0 first", out)
	}
	if out := must("code --list-extensions; echo listed"); strings.TrimSpace(out) != "listed" {
		t.Fatalf("code --list-extensions on a fresh profile: %q, want nothing", out)
	}
	// Extensions: an install that cannot work offline fails with VS
	// Code's status 1 and says why (code-server alone says 0); a .vsix
	// installs and is listed, and uninstalls.
	if out, code, err := run("code --install-extension ms-python.python", 3*time.Minute); err != nil || code != 1 || !strings.Contains(out, "open-vsx.org") {
		t.Fatalf("an offline install from the gallery: exit %d, %v: %q; want exit 1 naming the gallery", code, err, out)
	}
	must(`cd /tmp && mkdir -p vsix/extension && echo '{"name":"hello","publisher":"deskfarm","version":"0.0.1","engines":{"vscode":"^1.50.0"}}' >vsix/extension/package.json && cd vsix && python3 -c "import zipfile; z = zipfile.ZipFile('/tmp/hello.vsix', 'w'); z.write('extension/package.json'); z.close()"`)
	if out := must("code --install-extension /tmp/hello.vsix && code --list-extensions"); !strings.HasSuffix(out, "deskfarm.hello\n") {
		t.Fatalf("a .vsix install, then the list: %q, want deskfarm.hello listed", out)
	}
	if out, code, err := run("code --uninstall-extension deskfarm.hello && code --uninstall-extension deskfarm.hello", 3*time.Minute); err != nil || code != 1 || !strings.Contains(out, "successfully uninstalled") || !strings.Contains(out, "is not installed") {
		t.Fatalf("uninstall twice: exit %d, %v: %q; want the first to work and the second to fail with 1", code, err, out)
	}
	if out, _, _ := run("cat /home/user/.config/Code/User/settings.json", time.Minute); strings.Contains(out, "minimap") {
		t.Fatalf("settings.json already has the setting the test makes: %s", out)
	}

	// As OSWorld's SetupController launches it.
	must("setsid -f code >/dev/null 2>&1 </dev/null")
	began := time.Now()
	var title string
	for title == "" {
		out, _, err := run("wmctrl -lx", time.Minute)
		for _, line := range strings.Split(out, "\n") {
			// Chromium's app window: WM_CLASS "Code" as VS Code's; the
			// instance half is the page's host ("127.0.0.1").
			if strings.Contains(line, ".Code ") && strings.Contains(line, "Visual Studio Code") {
				title = line
			}
		}
		if title == "" && time.Since(began) > 5*time.Minute {
			log, _, _ := run("tail -n 20 /home/user/.config/Code/code-server.log", time.Minute)
			t.Fatalf("no window of class Code titled \"Visual Studio Code\" in 5 min (last: %v):\n%s\nserver log:\n%s", err, out, log)
		}
		time.Sleep(2 * time.Second)
	}
	t.Logf("VS Code's window after %s: %s", time.Since(began).Round(100*time.Millisecond), title)

	// A setting changed through the workbench (View: Toggle Minimap writes
	// editor.minimap.enabled into the user's settings), typed as an agent
	// would: the command palette, the command, Enter. The workbench may
	// still be loading its parts under TCG, so the keys are sent again
	// until the file shows it.
	began = time.Now()
	for {
		_, _, _ = run("wmctrl -a 'Visual Studio Code'; sleep 1; xdotool key --clearmodifiers ctrl+shift+p; sleep 3; xdotool type --delay 60 'View: Toggle Minimap'; sleep 3; xdotool key Return", 2*time.Minute)
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			if out, _, _ := run("cat /home/user/.config/Code/User/settings.json", time.Minute); strings.Contains(out, `"editor.minimap.enabled"`) {
				t.Logf("settings.json after %s: %s", time.Since(began).Round(100*time.Millisecond), strings.Join(strings.Fields(out), " "))
				return
			}
			time.Sleep(2 * time.Second)
		}
		if time.Since(began) > 4*time.Minute {
			wins, _, _ := run("wmctrl -l", time.Minute)
			log, _, _ := run("tail -n 20 /home/user/.config/Code/code-server.log", time.Minute)
			t.Fatalf("the workbench's setting never reached ~/.config/Code/User/settings.json in 4 min; windows:\n%s\nserver log:\n%s", wins, log)
		}
		_, _, _ = run("xdotool key Escape", time.Minute)
	}
}
