package web_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/vmm/vmmtest"
	"github.com/deskfarm/deskfarm/web"
)

// pathLog records the paths a server was asked for.
type pathLog struct {
	mu    sync.Mutex
	paths []string
}

func (l *pathLog) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.paths = append(l.paths, r.URL.Path)
		l.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

func (l *pathLog) reset() {
	l.mu.Lock()
	l.paths = nil
	l.mu.Unlock()
}

func (l *pathLog) saw(p string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Contains(l.paths, p)
}

// A browser with the viewer link: the page loads under the farm's CSP
// (its scripts run and open their feeds), the token leaves the address bar
// but stays in the cookie, and the Take control button is refused with a
// message that names the control token. It needs chromium, not a VM.
func TestE2EBrowserViewerToken(t *testing.T) {
	farm := vmmtest.New()
	vm, err := farm.Create(context.Background(), vmm.CreateOptions{Image: "tiny"})
	if err != nil {
		t.Fatal(err)
	}
	var seen pathLog
	srv := httptest.NewServer(seen.wrap(web.NewServer(farm, web.Options{
		Token: "ctl-secret", ViewerToken: "view-secret", TrustedNets: []netip.Prefix{}})))
	t.Cleanup(srv.Close)
	ctx := browser(t)

	do(t, ctx, 20*time.Second,
		chromedp.Navigate(srv.URL+"/?token=view-secret"),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-vm="`+vm.ID+`"]`)))
	if href := eval[string](t, ctx, `location.href`); strings.Contains(href, "token") {
		t.Errorf("the address bar still shows the token: %s", href)
	}
	// The cookie carries the viewer on, to a page with scripts.
	do(t, ctx, 20*time.Second, chromedp.Navigate(srv.URL+"/vms/"+vm.ID))
	poll(t, ctx, 20*time.Second, `window.deskfarm !== undefined`)
	// The page's module, its frame websocket and its activity feed all got
	// past the CSP to the server.
	waitFor(t, 10*time.Second, "the page's stream and activity requests", func() bool {
		return seen.saw("/v1/vms/"+vm.ID+"/stream") && seen.saw("/v1/vms/"+vm.ID+"/activity")
	})
	do(t, ctx, 10*time.Second, chromedp.Click(chromedp.CSS(`#take`)))
	poll(t, ctx, 10*time.Second, `document.getElementById('mode').textContent.includes('viewer_token')`)
	if mode := eval[string](t, ctx, `document.getElementById('mode').textContent`); !strings.Contains(mode, "403") {
		t.Errorf("take control as a viewer shows %q, want a 403", mode)
	}
	if eval[bool](t, ctx, `document.getElementById('giveback').hidden === false`) {
		t.Error("the page claims control after a refusal")
	}
	// The wall's module runs too (it was an inline script, which the CSP
	// forbids).
	seen.reset()
	do(t, ctx, 20*time.Second, chromedp.Navigate(srv.URL+"/wall"))
	waitFor(t, 10*time.Second, "the wall's stream request", func() bool {
		return seen.saw("/v1/vms/" + vm.ID + "/stream")
	})
}
