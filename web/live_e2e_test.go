package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/internal/testenv"
	"github.com/deskfarm/deskfarm/web"
)

// The dashboard is live: a VM created through the API after the page
// loaded appears on it, ready and with a thumbnail of its desktop, and
// leaves it when destroyed, all without a reload.
func TestE2EDashboardLive(t *testing.T) {
	m := testenv.Manager(t, "tiny")
	desks := desk.NewPool(m, nil)
	srv := httptest.NewServer(web.NewServer(m, web.Options{Desks: desks}))
	t.Cleanup(func() { srv.Close(); desks.Close() })
	ctx := browser(t)

	do(t, ctx, 20*time.Second, chromedp.Navigate(srv.URL+"/"))
	poll(t, ctx, 20*time.Second, `document.body.dataset.live === 'open' && window.deskfarm.state !== null`)
	if got := eval[string](t, ctx, `document.querySelector('#vms tbody').innerText`); !strings.Contains(got, "no VMs") {
		t.Fatalf("dashboard of an empty farm shows %q", got)
	}
	// A reload would clear this.
	eval[bool](t, ctx, `window.loadedOnce = true`)

	resp, err := http.Post(srv.URL+"/v1/vms", "application/json", strings.NewReader(`{"image":"tiny","memory_mib":256,"vcpus":1}`))
	if err != nil {
		t.Fatal(err)
	}
	var vm struct {
		ID     string `json:"id"`
		Width  int    `json:"width"`
		Height int    `json:"height"`
	}
	json.NewDecoder(resp.Body).Decode(&vm) //nolint:errcheck // checked below
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || vm.ID == "" {
		t.Fatalf("create: %d %+v", resp.StatusCode, vm)
	}
	t.Cleanup(func() { m.Destroy(context.Background(), vm.ID) }) //nolint:errcheck // gone already when the test passes

	row := fmt.Sprintf(`document.querySelector('tr[data-vm="%s"]')`, vm.ID)
	poll(t, ctx, 20*time.Second, row+` !== null && `+row+`.innerText.includes('ready')`)
	text := eval[string](t, ctx, row+`.innerText`)
	for _, want := range []string{vm.ID, "ready", "tiny", "agent"} {
		if !strings.Contains(text, want) {
			t.Errorf("the VM's row reads %q, which lacks %q", text, want)
		}
	}
	// The thumbnail draws the desktop's frames (its canvas takes their size).
	thumb := fmt.Sprintf(`document.querySelector('canvas[data-thumb="%s"]')`, vm.ID)
	poll(t, ctx, 30*time.Second, fmt.Sprintf(`%s !== null && %s.width === %d && %s.height === %d && window.deskfarm.thumbs.get(%q).stream.frames > 0`,
		thumb, thumb, vm.Width, thumb, vm.Height, vm.ID))
	if !eval[bool](t, ctx, `window.loadedOnce === true`) {
		t.Fatal("the page reloaded")
	}

	req, _ := http.NewRequest("DELETE", srv.URL+"/v1/vms/"+vm.ID, nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("destroy: %v %v", resp, err)
	}
	poll(t, ctx, 20*time.Second, row+` === null && document.querySelector('#vms tbody').innerText.includes('no VMs')`)
	if !eval[bool](t, ctx, `window.loadedOnce === true && window.deskfarm.thumbs.size === 0`) {
		t.Fatal("the page reloaded, or kept the destroyed VM's thumbnail")
	}
}
