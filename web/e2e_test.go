package web_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/images/tiny/screen"
	"github.com/deskfarm/deskfarm/internal/testenv"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/web"
)

// These tests drive a real tiny VM through the HTTP API, as an agent would,
// and check what the guest saw: its own drawing (pixels) and input log.

type tinyAPI struct {
	t   *testing.T
	m   *vmm.Manager
	srv *httptest.Server
	vm  vmm.VM
}

func startTiny(t *testing.T) *tinyAPI {
	return startVM(t, vmm.CreateOptions{Image: "tiny", MemoryMiB: 256, VCPUs: 1})
}

// startVM serves the API with desks over a real farm of opts.Image and
// creates one VM of opts behind it.
func startVM(t *testing.T, opts vmm.CreateOptions) *tinyAPI {
	m := testenv.Manager(t, opts.Image)
	pool := desk.NewPool(m, nil)
	srv := httptest.NewServer(web.NewServer(m, web.Options{Desks: pool}))
	t.Cleanup(func() { srv.Close(); pool.Close() })
	vm, err := m.Create(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return &tinyAPI{t: t, m: m, srv: srv, vm: vm}
}

// act posts an actions request and decodes the answer; status is checked.
func (a *tinyAPI) act(body string, wantStatus int) web.ActionsResponse {
	a.t.Helper()
	resp, err := http.Post(a.srv.URL+"/v1/vms/"+a.vm.ID+"/actions", "application/json", strings.NewReader(body))
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != wantStatus {
		a.t.Fatalf("POST actions %s: status %d, want %d: %s", body, resp.StatusCode, wantStatus, b)
	}
	var out web.ActionsResponse
	if wantStatus == 200 {
		if err := json.Unmarshal(b, &out); err != nil {
			a.t.Fatal(err)
		}
	}
	return out
}

func (a *tinyAPI) errorOf(body string, wantStatus int) web.ErrorBody {
	a.t.Helper()
	resp, err := http.Post(a.srv.URL+"/v1/vms/"+a.vm.ID+"/actions", "application/json", strings.NewReader(body))
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	var e web.ErrorResponse
	json.NewDecoder(resp.Body).Decode(&e)
	if resp.StatusCode != wantStatus {
		a.t.Fatalf("POST actions %s: status %d, want %d: %+v", body, resp.StatusCode, wantStatus, e)
	}
	return e.Error
}

func (a *tinyAPI) screenshot(query string) *image.RGBA {
	a.t.Helper()
	resp, err := http.Get(a.srv.URL + "/v1/vms/" + a.vm.ID + "/screenshot?" + query)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		a.t.Fatalf("screenshot: %d %s", resp.StatusCode, b)
	}
	img, err := png.Decode(resp.Body)
	if err != nil {
		a.t.Fatal(err)
	}
	return toRGBA(img)
}

func toRGBA(img image.Image) *image.RGBA {
	if r, ok := img.(*image.RGBA); ok {
		return r
	}
	b := img.Bounds()
	out := image.NewRGBA(b)
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			out.Set(x, y, img.At(x, y))
		}
	}
	return out
}

func decodeResultImage(t *testing.T, r web.ActionsResponse) *image.RGBA {
	t.Helper()
	if r.Image == nil {
		t.Fatal("no image in result")
	}
	b, err := base64.StdEncoding.DecodeString(r.Image.Data)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return toRGBA(img)
}

// inputLog returns the guest's input log lines since the last call.
func (a *tinyAPI) inputLog() []string {
	a.t.Helper()
	b, err := a.m.ReadFile(context.Background(), a.vm.ID, screen.InputLogPath)
	if err != nil {
		a.t.Fatal(err)
	}
	// Truncate so the next call sees only new events.
	if err := a.m.WriteFile(context.Background(), a.vm.ID, screen.InputLogPath, nil, 0); err != nil {
		a.t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

func (a *tinyAPI) guestText() string {
	a.t.Helper()
	b, err := a.m.ReadFile(context.Background(), a.vm.ID, screen.TextPath)
	if err != nil {
		a.t.Fatal(err)
	}
	return string(b)
}

// markerAt checks the whole marker square of button b is drawn centred at p.
func markerAt(img *image.RGBA, b screen.Button, p image.Point) error {
	want := screen.MarkerColor(b)
	r := screen.MarkerRect(p).Intersect(img.Bounds())
	if r.Empty() {
		return fmt.Errorf("marker at %v is off screen", p)
	}
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			if got := img.RGBAAt(x, y); got != want {
				return fmt.Errorf("pixel (%d,%d) of the marker at %v is %v, want %v", x, y, p, got, want)
			}
		}
	}
	// Just outside the square is not marker colour (it is centred, not shifted).
	for _, q := range []image.Point{{r.Min.X - 1, p.Y}, {r.Max.X, p.Y}, {p.X, r.Min.Y - 1}, {p.X, r.Max.Y}} {
		if q.In(img.Bounds()) && img.RGBAAt(q.X, q.Y) == want {
			return fmt.Errorf("marker colour at %v, outside the marker centred at %v", q, p)
		}
	}
	return nil
}

func TestE2EClicksLandExactly(t *testing.T) {
	a := startTiny(t)
	// Native coordinates, including the corners.
	for _, p := range []image.Point{{640, 400}, {0, 0}, {1279, 799}, {1279, 0}, {0, 799}, {333, 517}} {
		res := a.act(fmt.Sprintf(`{"screenshot_size":"native","tool":"computer_20251124","input":{"action":"left_click","coordinate":[%d,%d]}}`, p.X, p.Y), 200)
		img := decodeResultImage(t, res)
		if err := markerAt(img, screen.ButtonLeft, p); err != nil {
			t.Errorf("native click: %v", err)
		}
		t.Logf("click at %v: settled in %.0f ms, request %.0f ms", p, res.SettleMS, res.DurationMS)
	}
	// Right and middle buttons draw their own colours.
	res := a.act(`{"screenshot_size":"native","tool":"computer_20251124","input":{"action":"right_click","coordinate":[100,600]}}`, 200)
	if err := markerAt(decodeResultImage(t, res), screen.ButtonRight, image.Pt(100, 600)); err != nil {
		t.Error(err)
	}
	res = a.act(`{"screenshot_size":"native","tool":"computer_20251124","input":{"action":"middle_click","coordinate":[200,600]}}`, 200)
	if err := markerAt(decodeResultImage(t, res), screen.ButtonMiddle, image.Pt(200, 600)); err != nil {
		t.Error(err)
	}

	// Scaled: the agent sees 1024x640 and clicks in that space.
	res = a.act(`{"screenshot_size":"1024x640","tool":"computer_20251124","input":{"action":"left_click","coordinate":[512,320]}}`, 200)
	if res.ScreenshotWidth != 1024 || res.ScreenshotHeight != 640 || res.Image.Width != 1024 {
		t.Fatalf("scaled session: %dx%d, image %dx%d", res.ScreenshotWidth, res.ScreenshotHeight, res.Image.Width, res.Image.Height)
	}
	native := a.screenshot("format=png")
	if err := markerAt(native, screen.ButtonLeft, image.Pt(640, 400)); err != nil {
		t.Errorf("scaled click (512,320) of 1024x640 should land at native (640,400): %v", err)
	}

	// Off-screen coordinates are errors, never clamped, and send nothing.
	a.inputLog()
	for _, body := range []string{
		`{"screenshot_size":"native","tool":"computer_20251124","input":{"action":"left_click","coordinate":[1280,10]}}`,
		`{"screenshot_size":"native","tool":"computer_20251124","input":{"action":"left_click","coordinate":[-1,10]}}`,
		`{"screenshot_size":"1024x640","tool":"computer_20251124","input":{"action":"mouse_move","coordinate":[10,640]}}`,
	} {
		e := a.errorOf(body, 400)
		if e.Code != web.CodeOutOfBounds && e.Code != "invalid_request" {
			t.Errorf("%s: code %q (%s)", body, e.Code, e.Message)
		}
	}
	if log := a.inputLog(); len(log) > 1 || (len(log) == 1 && log[0] != "") {
		t.Errorf("an out-of-range action reached the guest: %q", log)
	}
	// Unknown actions and keys name what is accepted.
	if e := a.errorOf(`{"tool":"computer_20251124","input":{"action":"teleport"}}`, 400); !strings.Contains(e.Message, "left_click") {
		t.Errorf("unknown action error does not list accepted actions: %s", e.Message)
	}
	if e := a.errorOf(`{"tool":"computer_20251124","input":{"action":"key","text":"ctrl+banana"}}`, 400); e.Code != web.CodeUnknownKey {
		t.Errorf("unknown key: %+v", e)
	}
}

func TestE2ETypingArrivesExactly(t *testing.T) {
	a := startTiny(t)
	var printable strings.Builder
	for c := ' '; c <= '~'; c++ {
		printable.WriteRune(c)
	}
	texts := []string{`Hello, World! <a href="x">`, `~!@#$%^&*()_+{}|:"<>?`, printable.String()}
	want := screen.NewCanvas(1280, 800)
	for _, text := range texts {
		body, _ := json.Marshal(map[string]any{"screenshot_size": "native", "tool": "computer_20251124",
			"input": map[string]any{"action": "type", "text": text + "\n"}})
		res := a.act(string(body), 200)
		want.TypeString(text + "\n")
		got := decodeResultImage(t, res)
		area := screen.TextArea(1280, 800)
		for y := area.Min.Y; y < area.Max.Y; y++ {
			for x := area.Min.X; x < area.Max.X; x++ {
				if got.RGBAAt(x, y) != want.Img.RGBAAt(x, y) {
					t.Fatalf("after typing %q: pixel (%d,%d) is %v, want %v; guest text so far: %q", text, x, y, got.RGBAAt(x, y), want.Img.RGBAAt(x, y), a.guestText())
				}
			}
		}
	}
	if got, wantText := a.guestText(), want.Text(); got != wantText {
		t.Fatalf("guest text %q, want %q", got, wantText)
	}
}

// hasSeq reports whether lines contain want as a subsequence.
func hasSeq(lines, want []string) bool {
	i := 0
	for _, l := range lines {
		if i < len(want) && strings.HasPrefix(l, want[i]) {
			i++
		}
	}
	return i == len(want)
}

func TestE2EChordsDragScrollHold(t *testing.T) {
	a := startTiny(t)
	a.act(`{"screenshot_size":"native","tool":"computer_20251124","input":{"action":"mouse_move","coordinate":[10,10]}}`, 200)
	a.inputLog()
	cases := []struct {
		input string
		want  []string
	}{
		{`{"action":"key","text":"ctrl+shift+a"}`, []string{"key down 29 ", "key down 42 ", "key down 30 ", "key up 30 ", "key up 42 ", "key up 29 "}},
		{`{"action":"double_click","coordinate":[300,300]}`, []string{"button down left 300 300", "button up left 300 300", "button down left 300 300", "button up left 300 300"}},
		{`{"action":"triple_click","coordinate":[310,300]}`, []string{"button down left 310 300", "button up left", "button down left", "button up left", "button down left", "button up left 310 300"}},
		{`{"action":"left_click_drag","start_coordinate":[100,100],"coordinate":[400,200]}`, []string{"button down left 100 100", "motion", "button up left 400 200"}},
		{`{"action":"scroll","coordinate":[500,500],"scroll_direction":"down","scroll_amount":3}`, []string{"wheel -1", "wheel -1", "wheel -1"}},
		// QEMU 7.2's VNC server and virtio tablet carry no horizontal wheel,
		// so modifiers are checked on a vertical scroll.
		{`{"action":"scroll","coordinate":[500,500],"scroll_direction":"up","scroll_amount":2,"text":"shift"}`, []string{"key down 42 ", "wheel 1", "wheel 1", "key up 42 "}},
		{`{"action":"left_click","coordinate":[600,300],"text":"ctrl"}`, []string{"key down 29 ", "button down left 600 300", "button up left 600 300", "key up 29 "}},
		{`{"action":"hold_key","text":"shift","duration":0.5}`, []string{"key down 42 ", "key up 42 "}},
		{`{"action":"left_mouse_down","coordinate":[700,300]}`, []string{"button down left 700 300"}},
		{`{"action":"left_mouse_up","coordinate":[720,320]}`, []string{"button up left 720 320"}},
	}
	for _, c := range cases {
		start := time.Now()
		a.act(`{"screenshot_size":"native","tool":"computer_20251124","input":`+c.input+`}`, 200)
		took := time.Since(start)
		log := a.inputLog()
		if !hasSeq(log, c.want) {
			t.Errorf("%s: guest saw %q, want in order %q", c.input, log, c.want)
		}
		if strings.Contains(c.input, "hold_key") && took < 500*time.Millisecond {
			t.Errorf("hold_key for 0.5 s returned after %s", took)
		}
	}
	res := a.act(`{"screenshot_size":"native","tool":"computer_20251124","input":{"action":"cursor_position"}}`, 200)
	if !strings.Contains(res.Text, "X=720") || !strings.Contains(res.Text, "Y=320") {
		t.Errorf("cursor_position: %q", res.Text)
	}
}

func TestE2EZoomIsNativeCrop(t *testing.T) {
	a := startTiny(t)
	a.act(`{"screenshot_size":"native","tool":"computer_20251124","input":{"action":"type","text":"zoom me"}}`, 200)
	// The agent sees 640x400; the region is in its coordinates, the crop is native.
	res := a.act(`{"screenshot_size":"640x400","tool":"computer_20251124","input":{"action":"zoom","region":[0,0,160,100]}}`, 200)
	zoomed := decodeResultImage(t, res)
	native := a.screenshot("format=png")
	crop := native.SubImage(image.Rect(0, 0, 320, 200)).(*image.RGBA)
	// A 2x nearest upscale of the native crop is what an exact zoom to
	// 640x400 looks like; filters smooth edges, so compare with a tolerance.
	if zoomed.Bounds().Dx() != 640 || zoomed.Bounds().Dy() != 400 {
		t.Fatalf("zoom size %v", zoomed.Bounds())
	}
	var diff, n float64
	for y := 0; y < 400; y++ {
		for x := 0; x < 640; x++ {
			c1 := zoomed.RGBAAt(x, y)
			c2 := crop.RGBAAt(x/2, y/2)
			diff += absd(c1, c2)
			n++
		}
	}
	if mean := diff / n; mean > 12 {
		t.Fatalf("zoom differs from the native crop by %.1f per pixel", mean)
	}
	// The text glyphs are in the crop at full native detail: some text colour.
	if !hasColor(zoomed, screen.TextColor) {
		t.Fatal("zoom shows no text")
	}
}

func absd(a, b color.RGBA) float64 {
	d := func(x, y uint8) float64 {
		if x > y {
			return float64(x - y)
		}
		return float64(y - x)
	}
	return (d(a.R, b.R) + d(a.G, b.G) + d(a.B, b.B)) / 3
}

func hasColor(img *image.RGBA, c color.RGBA) bool {
	for i := 0; i < len(img.Pix); i += 4 {
		if img.Pix[i] == c.R && img.Pix[i+1] == c.G && img.Pix[i+2] == c.B {
			return true
		}
	}
	return false
}
