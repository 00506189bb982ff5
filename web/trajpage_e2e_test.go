package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"log/slog"
	"math"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/internal/testenv"
	"github.com/deskfarm/deskfarm/trajectory"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/vmm/vmmtest"
	"github.com/deskfarm/deskfarm/web"
)

// The trajectory page as a person reads it in Chromium: the step count,
// the arrow keys moving through the steps with each one's screenshot
// loaded, the click point and drag path drawn where the steps' actions
// put them on the displayed image, the request, a person's step and an
// error step, and the video playing; the list, the dashboard and the VM
// page link to it. The trajectory is written as the store lays one out
// (with a person's step and an error step, which a VM run cannot make
// cheaply) and served by the real routes; TestE2ETrajectoryPageRecorded
// shows a real VM's recording.
func TestE2ETrajectoryPage(t *testing.T) {
	farm := vmmtest.New()
	vm, err := farm.Create(context.Background(), vmm.CreateOptions{Image: "desktop"})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	const id = "ep-7f3a9c"
	writeTrajectory(t, dir, id, vm.ID)
	// The store finds the trajectory as a restarted server does.
	tm, err := trajectory.New(trajectory.Config{Dir: dir, Retention: -1, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(web.NewServer(farm, web.Options{Trajectories: tm}))
	t.Cleanup(srv.Close)
	ctx := browser(t)

	do(t, ctx, 20*time.Second, chromedp.Navigate(srv.URL+"/trajectories/"+id))
	poll(t, ctx, 20*time.Second, `document.body.dataset.loaded === 'true'`)
	text := func(sel string) string {
		t.Helper()
		return eval[string](t, ctx, fmt.Sprintf(`document.querySelector(%q).innerText`, sel))
	}
	if got := text("#count"); got != "4 steps" {
		t.Errorf("step count reads %q, want \"4 steps\"", got)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll('#timeline li').length`); n != 4 {
		t.Errorf("the timeline has %d steps, want 4", n)
	}
	if got := text("#stepno"); got != "step 1 of 4" {
		t.Errorf("the page opens on %q, want step 1 of 4", got)
	}
	// loaded waits for the screenshot of the current step to be decoded
	// and checks it is the step's file at its size.
	loaded := func(file string, width int) {
		t.Helper()
		poll(t, ctx, 10*time.Second, fmt.Sprintf(`(() => { const i = document.getElementById('shot');
			return i.src.endsWith(%q) && i.complete && i.naturalWidth > 0; })()`, "/v1/trajectories/"+id+"/files/"+file))
		if w := eval[int](t, ctx, `document.getElementById('shot').naturalWidth`); w != width {
			t.Errorf("%s is %d wide on the page, want %d", file, w, width)
		}
	}
	// marker returns a mark's recorded point and, from its box on the page,
	// the point of the screenshot it is drawn on.
	type mark struct{ X, Y, OnX, OnY float64 }
	marker := func(sel string, w int) mark {
		t.Helper()
		return eval[mark](t, ctx, fmt.Sprintf(`(() => {
			const c = document.querySelector(%q), i = document.getElementById('shot');
			if (!c) return null;
			const b = c.getBoundingClientRect(), ib = i.getBoundingClientRect(), k = %d / ib.width;
			return { X: c.cx.baseVal.value, Y: c.cy.baseVal.value,
				OnX: (b.left + b.width / 2 - ib.left) * k, OnY: (b.top + b.height / 2 - ib.top) * k };
		})()`, sel, w))
	}
	near := func(what string, m mark, x, y float64) {
		t.Helper()
		if m.X != x || m.Y != y {
			t.Errorf("%s drawn at (%v, %v), want (%v, %v)", what, m.X, m.Y, x, y)
		}
		// The image is shown smaller than it is: the mark must scale with it.
		if math.Abs(m.OnX-x) > 2 || math.Abs(m.OnY-y) > 2 {
			t.Errorf("%s shows over (%.1f, %.1f) of the screenshot, want (%v, %v)", what, m.OnX, m.OnY, x, y)
		}
	}

	// Step 1: an agent's Claude left_click.
	loaded("screens/0001.png", 1024)
	// The marks must follow the image's scale, so it must have one.
	if shown := eval[float64](t, ctx, `document.getElementById('shot').getBoundingClientRect().width`); shown == 1024 {
		t.Fatalf("the screenshot is shown at its own size, %v wide: the test cannot see the marks scale", shown)
	}
	near("step 1's click", marker(`#marks circle.click[data-action="0"]`, 1024), 412, 230)
	if req := text("#request"); !strings.Contains(req, `"left_click"`) || !strings.Contains(req, "toolu_01") {
		t.Errorf("step 1's request reads %q", req)
	}
	if resp := text("#response"); !strings.Contains(resp, "sha256:") || !strings.Contains(resp, "tool_result") {
		t.Errorf("step 1's answer reads %q", resp)
	}
	if got := text(`#meta dd[data-field="actor"]`); got != "agent" {
		t.Errorf("step 1's actor reads %q", got)
	}

	// Step 2: ArrowRight; a neutral drag, its path drawn from, via, to.
	do(t, ctx, 5*time.Second, chromedp.KeyEvent(kb.ArrowRight))
	poll(t, ctx, 5*time.Second, `document.getElementById('stepno').innerText === 'step 2 of 4'`)
	loaded("screens/0002.png", 1024)
	if pts := eval[string](t, ctx, `document.querySelector('#marks polyline.drag').getAttribute('points')`); pts != "100,500 300,520 700,120" {
		t.Errorf("step 2's drag path is %q", pts)
	}
	near("step 2's drag end", marker(`#marks circle.drag:last-of-type`, 1024), 700, 120)
	if cur := eval[string](t, ctx, `document.querySelector('#timeline li.current').dataset.step`); cur != "2" {
		t.Errorf("the timeline marks step %s current", cur)
	}

	// Step 3: a person's double click, in native pixels on a native picture.
	do(t, ctx, 5*time.Second, chromedp.KeyEvent(kb.ArrowRight))
	poll(t, ctx, 5*time.Second, `document.getElementById('stepno').innerText === 'step 3 of 4'`)
	loaded("native/0003.png", 1280)
	near("step 3's click", marker(`#marks circle.click[data-action="0"]`, 1280), 1000, 90)
	if got := text(`#meta dd[data-field="actor"]`); got != "person" {
		t.Errorf("step 3's actor reads %q", got)
	}
	if !eval[bool](t, ctx, `document.querySelector('#timeline li[data-step="3"]').classList.contains('person')`) {
		t.Error("the timeline does not tell the person's step apart")
	}

	// Step 4: a refused call: its error shows, and there is no picture.
	do(t, ctx, 5*time.Second, chromedp.KeyEvent(kb.ArrowRight))
	poll(t, ctx, 5*time.Second, `document.getElementById('stepno').innerText === 'step 4 of 4'`)
	if e := text("#error"); !strings.Contains(e, "invalid_field") || !strings.Contains(e, "coordinate") {
		t.Errorf("step 4's error reads %q", e)
	}
	if !eval[bool](t, ctx, `document.getElementById('shot').hidden && !document.getElementById('noshot').hidden`) {
		t.Error("step 4 shows a screenshot it does not have")
	}
	// The last step stays; ArrowLeft goes back.
	do(t, ctx, 5*time.Second, chromedp.KeyEvent(kb.ArrowRight), chromedp.KeyEvent(kb.ArrowLeft))
	poll(t, ctx, 5*time.Second, `document.getElementById('stepno').innerText === 'step 3 of 4'`)

	// The video is the recording, and plays.
	poll(t, ctx, 20*time.Second, `(() => { const v = document.getElementById('video');
		return !v.hidden && v.readyState >= 1 && v.duration > 2.5; })()`)
	if src := eval[string](t, ctx, `document.getElementById('video').src`); !strings.HasSuffix(src, "/v1/trajectories/"+id+"/files/recording.mp4") {
		t.Errorf("the video plays %s", src)
	}

	// A step is linkable (#step=N).
	do(t, ctx, 20*time.Second, chromedp.Navigate("about:blank"), chromedp.Navigate(srv.URL+"/trajectories/"+id+"#step=2"))
	poll(t, ctx, 20*time.Second, `document.body.dataset.loaded === 'true'`)
	if got := text("#stepno"); got != "step 2 of 4" {
		t.Errorf("#step=2 opens %q", got)
	}

	// An unknown trajectory says so.
	do(t, ctx, 20*time.Second, chromedp.Navigate(srv.URL+"/trajectories/ep-nope"))
	poll(t, ctx, 20*time.Second, `document.body.dataset.loaded === 'error'`)
	if got := text("#summary"); !strings.Contains(got, "ep-nope") {
		t.Errorf("an unknown trajectory's page reads %q", got)
	}

	// The list, the dashboard and the VM page link to it.
	link := `a[href="/trajectories/` + id + `"]`
	for _, page := range []string{"/trajectories", "/", "/vms/" + vm.ID} {
		do(t, ctx, 20*time.Second, chromedp.Navigate(srv.URL+page))
		poll(t, ctx, 20*time.Second, fmt.Sprintf(`(() => { const a = document.querySelector(%q);
			return a !== null && a.offsetParent !== null; })()`, link))
	}
	do(t, ctx, 20*time.Second, chromedp.Click(chromedp.CSS(link)), chromedp.WaitVisible(chromedp.CSS(`#timeline li[data-step="4"]`)))
	if got := text("#count"); got != "4 steps" {
		t.Errorf("the page the link opens reads %q", got)
	}
}

// writeTrajectory writes a finished trajectory of four steps as the
// recorder lays it out (api.TrajectoryInfo, api.TrajectoryStep): an
// agent's Claude click, an agent's neutral drag, a person's double click
// and a refused call, with screenshots and a real H.264 recording.
func writeTrajectory(t *testing.T, dir, id, vm string) {
	t.Helper()
	ffmpeg, err := exec.LookPath("ffmpeg")
	if err != nil {
		testenv.Unavailable(t, "ffmpeg is not installed")
	}
	d := filepath.Join(dir, id, "deskfarm")
	for _, sub := range []string{"screens", "native"} {
		if err := os.MkdirAll(filepath.Join(d, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	picture := func(name string, w, h int, c color.RGBA) {
		img := image.NewRGBA(image.Rect(0, 0, w, h))
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				img.SetRGBA(x, y, c)
				if y > h-30 {
					img.SetRGBA(x, y, color.RGBA{40, 40, 40, 255}) // a panel
				}
			}
		}
		var b bytes.Buffer
		if err := png.Encode(&b, img); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, name), b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	picture("screens/0001.png", 1024, 640, color.RGBA{30, 90, 160, 255})
	picture("screens/0002.png", 1024, 640, color.RGBA{30, 140, 90, 255})
	picture("native/0003.png", 1280, 800, color.RGBA{150, 60, 40, 255})
	out, err := exec.Command(ffmpeg, "-v", "error", "-f", "lavfi", "-i", "testsrc=size=1280x800:rate=10", "-t", "3",
		"-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p",
		"-movflags", "+frag_keyframe+empty_moov+default_base_moof", filepath.Join(d, "recording.mp4")).CombinedOutput()
	if err != nil {
		t.Fatalf("ffmpeg: %v: %s", err, out)
	}

	start := time.Date(2026, 12, 1, 15, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }
	steps := []api.TrajectoryStep{{
		Step: 1, Time: at(0.4), Actor: api.ActorAgent, Kind: api.KindActions, Tool: "computer_20251124",
		Request: raw(`{"tool":"computer_20251124","screenshot_size":"1024x640","input":{"type":"tool_use","id":"toolu_01A",` +
			`"name":"computer","input":{"action":"left_click","coordinate":[412,230]}}}`),
		Actions:  raw(`[{"kind":"click","x":412,"y":230}]`),
		Response: raw(`{"type":"tool_result","tool_use_id":"toolu_01A","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"sha256:1f2e"}}]}`),
		Status:   200, SettleMS: 180, DurationMS: 240, Cursor: &api.Point{X: 515, Y: 288},
		ScreenshotSize: "1024x640", NativeSize: "1280x800",
		Screenshots: api.StepScreens{After: "screens/0001.png", AfterSHA256: "1f2e"},
	}, {
		Step: 2, Time: at(1.2), Actor: api.ActorAgent, Kind: api.KindActions, Tool: "neutral",
		Request:  raw(`{"actions":[{"kind":"drag","from":{"x":100,"y":500},"via":[{"x":300,"y":520}],"x":700,"y":120}],"screenshot_size":"1024x640"}`),
		Actions:  raw(`[{"kind":"drag","from":{"x":100,"y":500},"via":[{"x":300,"y":520}],"x":700,"y":120}]`),
		Response: raw(`{"screenshot":"sha256:3c4d"}`), Status: 200, Cursor: &api.Point{X: 875, Y: 150},
		ScreenshotSize: "1024x640", NativeSize: "1280x800",
		Screenshots: api.StepScreens{Before: "screens/0001.png", After: "screens/0002.png"},
	}, {
		Step: 3, Time: at(1.9), Actor: api.ActorPerson, Kind: api.KindDemonstration,
		Actions:        raw(`[{"kind":"click","x":1000,"y":90,"count":2}]`),
		Cursor:         &api.Point{X: 1000, Y: 90},
		ScreenshotSize: "1280x800", NativeSize: "1280x800",
		Screenshots: api.StepScreens{After: "native/0003.png"},
	}, {
		Step: 4, Time: at(2.5), Actor: api.ActorAgent, Kind: api.KindActions, Tool: "computer_20251124",
		Request: raw(`{"tool":"computer_20251124","input":{"type":"tool_use","id":"toolu_01B","name":"computer",` +
			`"input":{"action":"left_click","coordinate":[5000,20]}}}`),
		Status: 400, IsError: true,
		Error: &api.ErrorBody{Code: "invalid_field", Field: "input.coordinate",
			Message: "input.coordinate: (5000, 20) is outside the 1024x640 screenshot"},
		ScreenshotSize: "1024x640", NativeSize: "1280x800",
	}}
	var lines bytes.Buffer
	enc := json.NewEncoder(&lines)
	for _, s := range steps {
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
	}
	end := at(3)
	info := api.TrajectoryInfo{ID: id, Episode: id, VM: vm, Pool: "desktop", Image: "desktop",
		State: api.TrajectoryFinished, ScreenshotSize: "1024x640", NativeSize: "1280x800",
		StartedAt: start, EndedAt: &end, EndReason: "episode ended", Steps: len(steps), Bytes: 123456,
		Video: "recording.mp4", VideoSeconds: 3, URL: "/trajectories/" + id}
	b, err := json.Marshal(info)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"trajectory.jsonl": lines.Bytes(), "info.json": b} {
		if err := os.WriteFile(filepath.Join(d, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
