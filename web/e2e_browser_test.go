package web_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/guestx"
	"github.com/deskfarm/deskfarm/vmm"
)

// An agent's back and forward mouse buttons (X buttons 8 and 9, which QEMU's
// VNC cannot carry and the desk clicks through the guest session) move
// Chromium through its history on the osworld image, as a user sees it: the
// focused window's title follows the page.
func TestE2EBrowserBackForward(t *testing.T) {
	a := startVM(t, vmm.CreateOptions{Image: "osworld", MemoryMiB: 2048, VCPUs: 2, Width: 1920, Height: 1080})
	m, vm, ctx := a.m, a.vm, context.Background()

	// Two pages; most of page one is its link, so a click in the middle of
	// the page follows it. The titles share no substring. (A first page
	// with a meta charset, a position:fixed link and a 40px font kept
	// Chromium 156 at "Loading..." for 5 minutes when it was the start-up
	// URL, 3 times of 3; this one loads in ~40 s.)
	const first, second = "deskfarm-first-page", "deskfarm-other-page"
	page := func(title, body string) []byte {
		return []byte(`<!doctype html><html><head><title>` + title + `</title></head><body>` + body + `</body></html>`)
	}
	for name, b := range map[string][]byte{
		"/home/user/p1.html": page(first, `<a href="p2.html" style="display:block;height:95vh;background:#cde">to page two</a>`),
		"/home/user/p2.html": page(second, `<p>page two</p>`),
	} {
		if err := m.WriteFile(ctx, vm.ID, name, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// title returns the focused window's title, as the desktop user sees it.
	title := func() (string, error) {
		out, err := guestx.Output(ctx, m, vm.ID, guestx.Cmd{Shell: "xdotool getactivewindow getwindowname", Timeout: 20 * time.Second})
		return strings.TrimSpace(string(out)), err
	}
	// titleWithin waits up to d for the focused window's title to contain
	// want.
	var lastTitle string
	titleWithin := func(want string, d time.Duration) bool {
		for deadline := time.Now().Add(d); ; time.Sleep(500 * time.Millisecond) {
			got, err := title()
			if err == nil && strings.Contains(got, want) {
				return true
			}
			lastTitle = fmt.Sprintf("%s (err %v)", got, err)
			if time.Now().After(deadline) {
				return false
			}
		}
	}
	// waitTitle waits for the focused window's title to contain want; a
	// page change in Chromium under TCG takes a while to reach the title.
	waitTitle := func(want string, d time.Duration) {
		t.Helper()
		if !titleWithin(want, d) {
			t.Fatalf("focused window titled %s, want one containing %q within %v", lastTitle, want, d)
		}
	}

	launch := func() {
		t.Helper()
		if _, err := guestx.Output(ctx, m, vm.ID, guestx.Cmd{Shell: "setsid google-chrome --start-maximized file:///home/user/p1.html >/dev/null 2>&1 </dev/null &"}); err != nil {
			t.Fatal(err)
		}
	}
	launch()
	// In a freshly booted guest (no saved state yet) Chromium's first
	// window once stayed "Untitled - Chromium" for 5 minutes under TCG (CI,
	// 2026-12-01). A user would open the page again; so does the test,
	// once: a second launch hands the URL to the running browser.
	if !titleWithin(first, 3*time.Minute) {
		t.Logf("focused window titled %s after 3m; opening the page again", lastTitle)
		launch()
	}
	waitTitle(first, 3*time.Minute)
	// The title comes well before the page is painted and takes input:
	// under TCG Chromium showed a blank window for another 45 s, and a
	// click then was lost (seen in CI). Wait, as a user would, until the
	// link's background (#cde) is on the screen where the click goes.
	painted := func() bool {
		c := a.screenshot("format=png&size=native").RGBAAt(960, 500)
		return c.R == 0xcc && c.G == 0xdd && c.B == 0xee
	}
	for deadline := time.Now().Add(5 * time.Minute); !painted(); time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			t.Fatal("page one's link never showed at (960, 500) within 5 minutes")
		}
	}

	// Follow the link with an agent's left click in the page.
	click := func(button string) {
		t.Helper()
		item := `{"type":"computer_call","id":"cu_nav","call_id":"call_` + button + `","status":"completed",` +
			`"action":{"type":"click","button":"` + button + `","x":960,"y":500},"pending_safety_checks":[]}`
		a.act(`{"tool":"computer_use_preview","screenshot_size":"native","input":`+item+`}`, 200)
	}
	click("left")
	waitTitle(second, 2*time.Minute)

	click("back")
	waitTitle(first, 2*time.Minute)
	click("forward")
	waitTitle(second, 2*time.Minute)

	// The neutral vocabulary names the same buttons.
	a.act(`{"actions":[{"kind":"click","button":"back","x":960,"y":500}],"screenshot":"never"}`, 200)
	waitTitle(first, 2*time.Minute)
}
