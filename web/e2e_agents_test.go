package web_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3/responses"

	"github.com/deskfarm/deskfarm/guestx"
	"github.com/deskfarm/deskfarm/vmm"
)

// Issue 11's proof on one real desktop VM: each agent vocabulary drives it
// through POST /v1/vms/{id}/actions and gets its own answer back.
func TestE2EAgentProtocolsDesktop(t *testing.T) {
	a := startVM(t, vmm.CreateOptions{Image: "desktop", MemoryMiB: 1024, VCPUs: 2})
	m, vm, ctx := a.m, a.vm, context.Background()
	// sh runs a command in the desktop session and returns its stdout.
	sh := func(script string) string {
		t.Helper()
		out, err := guestx.Output(ctx, m, vm.ID, guestx.Cmd{Shell: script})
		if err != nil {
			t.Fatalf("%s: %v", script, err)
		}
		return string(out)
	}
	// waitTitle waits for the focused window's title to contain s.
	waitTitle := func(s string) {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for {
			out, err := guestx.Output(ctx, m, vm.ID, guestx.Cmd{Shell: "xdotool getactivewindow getwindowname"})
			if err == nil && strings.Contains(string(out), s) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no focused window titled %q: %q %v", s, out, err)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}

	// pointerNear checks the guest's pointer is at (x, y), give or take the
	// one pixel QEMU's USB tablet loses scaling positions to 0-32767 and
	// back (seen: 333,222 lands at 332,221).
	pointerNear := func(x, y int) {
		t.Helper()
		var gx, gy int
		out := sh("xdotool getmouselocation --shell")
		if _, err := fmt.Sscanf(out, "X=%d\nY=%d", &gx, &gy); err != nil {
			t.Fatalf("getmouselocation: %q: %v", out, err)
		}
		if gx < x-1 || gx > x+1 || gy < y-1 || gy > y+1 {
			t.Errorf("pointer in the guest at (%d,%d), want (%d,%d)", gx, gy, x, y)
		}
	}
	// still waits for the screen to stop changing (two fresh screenshots a
	// second apart alike, outside the panel clock) and returns it.
	still := func() *image.RGBA {
		t.Helper()
		prev := a.screenshot("fresh=true")
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
			time.Sleep(time.Second)
			cur := a.screenshot("fresh=true")
			if sameExceptClock(prev, cur) {
				return cur
			}
			prev = cur
		}
		t.Fatal("the screen kept changing for 60 s")
		return nil
	}

	t.Run("openai click lands", func(t *testing.T) {
		item := `{"type":"computer_call","id":"cu_e2e","call_id":"call_e2e","status":"completed",
			"action":{"type":"click","button":"left","x":333,"y":222},"pending_safety_checks":[]}`
		res := a.act(`{"tool":"computer_use_preview","input":`+item+`}`, 200)
		raw, _ := json.Marshal(res.ComputerCallOutput)
		var out responses.ResponseInputItemComputerCallOutput
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("computer_call_output %s does not decode with openai-go: %v", raw, err)
		}
		if out.CallID != "call_e2e" || string(out.Output.Type) != "computer_screenshot" {
			t.Fatalf("computer_call_output %s", raw)
		}
		img := dataURLImage(t, out.Output.ImageURL)
		if b := img.Bounds(); b.Dx() != 1280 || b.Dy() != 800 {
			t.Errorf("screenshot %v, want 1280x800", b)
		}
		// 1280x800 is WXGA: the agent's coordinates are the guest's pixels.
		pointerNear(333, 222)
	})

	t.Run("toolset failing middle action", func(t *testing.T) {
		turn := `[{"type":"tool_use","id":"tu_a","name":"mouse_move","input":{"coordinate":[100,100]}},
			{"type":"tool_use","id":"tu_b","name":"left_click","input":{"coordinate":[99999,5]}},
			{"type":"tool_use","id":"tu_c","name":"screenshot","input":{}}]`
		res := a.act(`{"tool":"computer_toolset_20260801","input":`+turn+`}`, 200)
		if len(res.ToolResults) != 3 {
			t.Fatalf("%d tool_results: %+v", len(res.ToolResults), res.ToolResults)
		}
		want := []struct {
			id, text string
			isErr    bool
		}{{"tu_a", "", false}, {"tu_b", "coordinate", true}, {"tu_c", "Not executed: an earlier computer action in this turn failed.", true}}
		for i, w := range want {
			tr := res.ToolResults[i]
			if tr.ToolUseID != w.id || tr.IsError != w.isErr {
				t.Errorf("result %d: id %s is_error %v, want %s %v", i, tr.ToolUseID, tr.IsError, w.id, w.isErr)
			}
			if w.text != "" && (len(tr.Content) == 0 || !strings.Contains(tr.Content[0].Text, w.text)) {
				t.Errorf("result %d content %+v, want text with %q", i, tr.Content, w.text)
			}
		}
		pointerNear(100, 100) // the first block ran
	})

	t.Run("unicode typed into mousepad comes back byte for byte", func(t *testing.T) {
		const text = "Grüße, café — naïve ✓ 日本語 😀\nsecond line: ASCII & ß"
		sh("setsid mousepad /home/user/unicode.txt >/dev/null 2>&1 &")
		waitTitle("unicode.txt")
		body, _ := json.Marshal(map[string]any{"tool": "computer_20251124", "input": map[string]any{"action": "type", "text": text}})
		a.act(string(body), 200)
		a.act(`{"tool":"computer_20251124","input":{"action":"key","text":"ctrl+s"}}`, 200)
		deadline := time.Now().Add(30 * time.Second)
		for {
			b, err := m.ReadFile(ctx, vm.ID, "/home/user/unicode.txt")
			if err == nil && len(b) > 0 {
				if !bytes.Equal(b, []byte(text)) {
					t.Fatalf("saved file holds %q (% x), want %q", b, b, text)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("mousepad saved nothing: %v", err)
			}
			time.Sleep(500 * time.Millisecond)
		}
		a.act(`{"tool":"computer_20251124","input":{"action":"key","text":"ctrl+q"}}`, 200)
	})

	t.Run("clipboard round-trips unicode", func(t *testing.T) {
		const text = "クリップボード ✓ Grüße\n二行目"
		body, _ := json.Marshal(map[string]any{"actions": []map[string]any{
			{"kind": "clipboard_set", "text": text}, {"kind": "clipboard_get"}}, "screenshot": "never"})
		res := a.act(string(body), 200)
		if res.Clipboard == nil || *res.Clipboard != text {
			t.Fatalf("clipboard_get = %v, want %q", res.Clipboard, text)
		}
	})

	t.Run("horizontal scroll moves a wide page sideways", func(t *testing.T) {
		// Lines far wider than the screen, of letters in no repeating
		// pattern, so a sideways shift of the text has one best match.
		r := rand.New(rand.NewPCG(11, 11))
		var wide strings.Builder
		for range 40 {
			for range 600 {
				wide.WriteByte(byte('a' + r.IntN(26)))
				if r.IntN(7) == 0 {
					wide.WriteByte(' ')
				}
			}
			wide.WriteByte('\n')
		}
		if err := m.WriteFile(ctx, vm.ID, "/home/user/wide.txt", []byte(wide.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		sh("setsid mousepad /home/user/wide.txt >/dev/null 2>&1 &")
		waitTitle("wide.txt")
		// The whole screen, so the scroll point is in the text.
		sh("xdotool getactivewindow windowmove --sync 0 0 windowsize --sync 1280 770")
		old := still()
		a.act(`{"tool":"computer_20251124","input":{"action":"scroll","coordinate":[640,400],"scroll_direction":"right","scroll_amount":2}}`, 200)
		cur := still()
		if sameExceptClock(old, cur) {
			t.Fatal("scrolling right changed nothing on the screen")
		}
		text := image.Rect(400, 200, 700, 500)
		dx, best, unmoved := sideways(old, cur, text)
		t.Logf("scroll right: text moved %d px left (mismatch %.4f, unmoved %.4f)", dx, best, unmoved)
		if dx <= 0 || best > unmoved/4 {
			t.Fatalf("after scrolling right the text did not move left: best shift %d px (mismatch %.4f, unmoved %.4f)", dx, best, unmoved)
		}
		a.act(`{"tool":"computer_20251124","input":{"action":"scroll","coordinate":[640,400],"scroll_direction":"left","scroll_amount":2}}`, 200)
		back := still()
		if dx2, best2, unmoved2 := sideways(cur, back, text); dx2 >= 0 || best2 > unmoved2/4 {
			t.Errorf("scrolling left moved the text by %d px (mismatch %.4f, unmoved %.4f), want to the right (negative)", dx2, best2, unmoved2)
		}
	})
}

// sameExceptClock compares two screenshots, ignoring the panel clock
// (bottom-right 80x30 pixels), which ticks on its own.
func sameExceptClock(a, b *image.RGBA) bool {
	if a.Bounds() != b.Bounds() {
		return false
	}
	w, h := a.Bounds().Dx(), a.Bounds().Dy()
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			if x >= w-80 && y >= h-30 {
				continue
			}
			i := a.PixOffset(x, y)
			if a.Pix[i] != b.Pix[i] || a.Pix[i+1] != b.Pix[i+1] || a.Pix[i+2] != b.Pix[i+2] {
				return false
			}
		}
	}
	return true
}

// sideways finds the horizontal shift dx for which cur(x) best equals
// old(x+dx) over region r, and returns it with its mean mismatch and that of
// no shift (0-1 per channel).
func sideways(old, cur *image.RGBA, r image.Rectangle) (dx int, best, still float64) {
	diff := func(dx int) float64 {
		var sum, n float64
		for y := r.Min.Y; y < r.Max.Y; y++ {
			for x := r.Min.X; x < r.Max.X; x++ {
				a, b := cur.RGBAAt(x, y), old.RGBAAt(x+dx, y)
				sum += absf(float64(a.R)-float64(b.R)) + absf(float64(a.G)-float64(b.G)) + absf(float64(a.B)-float64(b.B))
				n += 3 * 255
			}
		}
		return sum / n
	}
	still = diff(0)
	best = still
	// GTK scrolls pow(page, 2/3) per wheel click, ~120 px on a full-width
	// view: two clicks stay well inside the range.
	for d := -600; d <= 600; d++ {
		if r.Min.X+d < 0 || r.Max.X+d > old.Rect.Dx() {
			continue
		}
		if v := diff(d); v < best {
			best, dx = v, d
		}
	}
	return dx, best, still
}

func absf(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}

func dataURLImage(t *testing.T, url string) *image.RGBA {
	t.Helper()
	const prefix = "data:image/png;base64,"
	if !strings.HasPrefix(url, prefix) {
		t.Fatalf("image_url %.40q is not a PNG data URL", url)
	}
	b, err := base64.StdEncoding.DecodeString(url[len(prefix):])
	if err != nil {
		t.Fatal(err)
	}
	return decodePNG(t, b)
}

func decodePNG(t *testing.T, b []byte) *image.RGBA {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	rgba := image.NewRGBA(img.Bounds())
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y++ {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
			rgba.Set(x, y, img.At(x, y))
		}
	}
	return rgba
}
