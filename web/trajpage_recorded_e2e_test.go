package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/internal/testenv"
	"github.com/deskfarm/deskfarm/trajectory"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/web"
)

// A recording of a real VM, as an agent makes one through the API (a
// Claude click, a neutral drag, Claude typing, at a screenshot size below
// the screen's), shown on its page in Chromium: the steps arriving while it
// records, then the click drawn where the agent clicked on the picture it
// got, ArrowRight to the drag with its picture loaded, the typing's
// request and the video.
func TestE2ETrajectoryPageRecorded(t *testing.T) {
	m := testenv.Manager(t, "tiny")
	desks := desk.NewPool(m, nil)
	tm, err := trajectory.New(trajectory.Config{Dir: filepath.Join(t.TempDir(), "trajectories"), Desks: trajectory.DeskPool(desks)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(web.NewServer(m, web.Options{Desks: desks, Trajectories: tm}))
	t.Cleanup(func() { srv.Close(); desks.Close() })
	vm, err := m.Create(context.Background(), vmm.CreateOptions{Image: "tiny", MemoryMiB: 256, VCPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Destroy(context.Background(), vm.ID) }) //nolint:errcheck // the farm ends with the test
	// Before its directory goes: a failed test leaves it recording.
	t.Cleanup(func() { tm.Stop(context.Background(), vm.ID, "test ended") }) //nolint:errcheck // stopped already when it passed
	call := func(method, path, body string, want int) []byte {
		t.Helper()
		return send(t, srv.URL, method, path, body, want)
	}
	var info api.TrajectoryInfo
	if err := json.Unmarshal(call("POST", "/v1/vms/"+vm.ID+"/recording", `{}`, http.StatusCreated), &info); err != nil || info.ID == "" {
		t.Fatalf("start recording: %+v %v", info, err)
	}
	acts := "/v1/vms/" + vm.ID + "/actions"
	call("POST", acts, `{"screenshot_size":"640x400","tool":"computer_20251124","input":{"action":"left_click","coordinate":[100,80]}}`, 200)

	// The page of a trajectory being recorded follows its new steps.
	ctx := browser(t)
	do(t, ctx, 20*time.Second, chromedp.Navigate(srv.URL+"/trajectories/"+info.ID))
	poll(t, ctx, 20*time.Second, `document.body.dataset.loaded === 'true'`)
	text := func(sel string) string {
		t.Helper()
		return eval[string](t, ctx, fmt.Sprintf(`document.querySelector(%q).innerText`, sel))
	}
	if got := text("#count"); got != "1 step" {
		t.Errorf("the recording's page reads %q, want 1 step", got)
	}
	if got := text("#summary"); !strings.HasPrefix(got, "recording") {
		t.Errorf("the summary reads %q while recording", got)
	}
	call("POST", acts, `{"screenshot_size":"640x400","actions":[{"kind":"drag","from":{"x":300,"y":200},"x":500,"y":120}]}`, 200)
	call("POST", acts, `{"screenshot_size":"640x400","tool":"computer_20251124","input":{"action":"type","text":"deskfarm page"}}`, 200)
	poll(t, ctx, 20*time.Second, `document.getElementById('count').innerText === '3 steps' && document.getElementById('stepno').innerText === 'step 3 of 3'`)
	call("DELETE", "/v1/vms/"+vm.ID+"/recording", "", 200)
	poll(t, ctx, 20*time.Second, `document.getElementById('summary').innerText.startsWith('finished')`)

	do(t, ctx, 5*time.Second, chromedp.KeyEvent(kb.Home))
	poll(t, ctx, 5*time.Second, `document.getElementById('stepno').innerText === 'step 1 of 3'`)
	shotLoaded := `(() => { const i = document.getElementById('shot'); return i.complete && i.naturalWidth === 640; })()`
	poll(t, ctx, 10*time.Second, shotLoaded)
	click := eval[[]float64](t, ctx, `(() => { const c = document.querySelector('#marks circle.click');
		return c ? [c.cx.baseVal.value, c.cy.baseVal.value] : []; })()`)
	if len(click) != 2 || click[0] != 100 || click[1] != 80 {
		t.Errorf("step 1's click is drawn at %v, want [100 80]", click)
	}

	do(t, ctx, 5*time.Second, chromedp.KeyEvent(kb.ArrowRight))
	poll(t, ctx, 5*time.Second, `document.getElementById('stepno').innerText === 'step 2 of 3'`)
	poll(t, ctx, 10*time.Second, shotLoaded)
	if pts := eval[string](t, ctx, `document.querySelector('#marks polyline.drag').getAttribute('points')`); pts != "300,200 500,120" {
		t.Errorf("step 2's drag path is %q", pts)
	}

	do(t, ctx, 5*time.Second, chromedp.KeyEvent(kb.ArrowRight))
	poll(t, ctx, 5*time.Second, `document.getElementById('stepno').innerText === 'step 3 of 3'`)
	if req := text("#request"); !strings.Contains(req, "deskfarm page") {
		t.Errorf("step 3's request reads %q", req)
	}
	if resp := text("#response"); !strings.Contains(resp, "sha256:") {
		t.Errorf("step 3's answer reads %q, want the picture's hash", resp)
	}
	poll(t, ctx, 20*time.Second, `(() => { const v = document.getElementById('video');
		return !v.hidden && v.readyState >= 1 && v.duration > 0; })()`)
}

// send makes a request to the API at base and returns the answer's body,
// failing the test on another status than want.
func send(t *testing.T, base, method, path, body string, want int) []byte {
	t.Helper()
	req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, b, want)
	}
	return b
}
