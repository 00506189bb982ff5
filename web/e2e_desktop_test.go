package web_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/vmm"
)

// On the real desktop, an agent opens a terminal with keys alone, types a
// command that writes a file, and the file comes back through the guest agent.
func TestE2EDesktopTerminalByKeys(t *testing.T) {
	a := startVM(t, vmm.CreateOptions{Image: "desktop", MemoryMiB: 1024, VCPUs: 2})
	m, vm, ctx := a.m, a.vm, context.Background()

	// Claude's default session size on a 1280x800 screen is WXGA: native.
	res := a.act(`{"tool":"computer_20251124","input":{"action":"key","text":"ctrl+alt+t"}}`, 200)
	if res.ScreenshotWidth != 1280 {
		t.Fatalf("auto screenshot size on 1280x800 is %dx%d", res.ScreenshotWidth, res.ScreenshotHeight)
	}
	// Wait for the terminal window to take the focus, as an agent would by
	// looking at screenshots.
	deadline := time.Now().Add(60 * time.Second)
	for {
		r, err := m.Exec(ctx, vm.ID, vmm.ExecRequest{Argv: []string{"sh", "-c",
			// bookworm's xdotool has no getwindowclassname: is the active
			// window one of lxterminal's?
			`export DISPLAY=:0; a=$(xdotool getactivewindow) && xdotool search --onlyvisible --class lxterminal | grep -qx "$a" && echo lxterminal`}, Timeout: 20 * time.Second})
		if err == nil && strings.Contains(strings.ToLower(string(r.Stdout)), "lxterminal") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no focused terminal after ctrl+alt+t: %q %v", r.Stdout, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	// Shifted symbols, quotes and redirection: what typing tools get wrong.
	const payload = `Hello, World! <a href="x"> ~!@#$%^&*()_+{}|:?`
	cmd := `printf '%s\n' '` + payload + `' > ~/typed.txt` + "\n"
	body, _ := json.Marshal(map[string]any{"tool": "computer_20251124", "input": map[string]any{"action": "type", "text": cmd}})
	a.act(string(body), 200)

	deadline = time.Now().Add(30 * time.Second)
	for {
		b, err := m.ReadFile(ctx, vm.ID, "/home/user/typed.txt")
		if err == nil {
			if got := strings.TrimSuffix(string(b), "\n"); got != payload {
				t.Fatalf("file typed in the terminal holds %q, want %q", got, payload)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("typed command wrote no file: %v", err)
		}
		time.Sleep(300 * time.Millisecond)
	}
}
