package web

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/internal/fill"
	"github.com/deskfarm/deskfarm/pool"
	"github.com/deskfarm/deskfarm/vmm"
)

// The api types replaced server types that were sent as JSON directly.
// These tests marshal the server's value the old way and the converted
// value, and want the same bytes: the wire format did not change. Every
// field is set, so a field the server grows without the api reads as a
// difference here.

func sameJSON(t *testing.T, name string, old, conv any) {
	t.Helper()
	a, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(conv)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("%s: wire format changed\nserver type: %s\napi type:    %s", name, a, b)
	}
}

// Every field of the core type reaches the wire: the source is filled by
// reflection, so a field added to vmm.VM and not converted is a zero here,
// and a field converted from the wrong one a mismatch.
func TestWireVM(t *testing.T) {
	var vm vmm.VM
	fill.All(&vm)
	got := apiVM(vm)
	if z := fill.Zeros(got); len(z) != 0 {
		t.Errorf("api.VM fields not converted from vmm.VM: %v", z)
	}
	if m := fill.Mismatches(vm, got); len(m) != 0 {
		t.Errorf("api.VM fields that differ from vmm.VM's: %v", m)
	}
	// Labels and Forwards stay absent on the wire when a VM has none.
	vm.Labels, vm.Forwards = nil, nil
	b, _ := json.Marshal(apiVM(vm))
	if bytes.Contains(b, []byte(`"labels"`)) || bytes.Contains(b, []byte(`"forwards"`)) {
		t.Errorf("empty labels or forwards sent: %s", b)
	}
}

func TestWireCreateOptions(t *testing.T) {
	var in api.CreateOptions
	fill.All(&in)
	got := vmmCreateOptions(in)
	if z := fill.Zeros(got); len(z) != 0 {
		t.Errorf("vmm.CreateOptions fields not converted from api.CreateOptions: %v", z)
	}
	if m := fill.Mismatches(in, got); len(m) != 0 {
		t.Errorf("vmm.CreateOptions fields that differ from api.CreateOptions': %v", m)
	}
}

func TestWireEpisode(t *testing.T) {
	ended := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	ep := pool.Episode{ID: "e1", VM: "a1", Pool: "desktop", State: pool.EpisodeEnded, Warm: true, BootSeconds: 2,
		CreatedAt: ended.Add(-time.Hour), ExpiresAt: ended.Add(time.Hour), TTLSeconds: 7200, ScreenshotSize: "auto",
		EndedAt: &ended, EndReason: "deleted", ResetSeconds: 0.4, VMReplaced: true}
	type oldEpisode struct {
		pool.Episode
		ViewerURL string `json:"viewer_url"`
	}
	url := "http://h/vms/a1"
	sameJSON(t, "episode", oldEpisode{ep, url}, apiEpisode(ep, url))
	ep.EndedAt, ep.EndReason, ep.ResetSeconds, ep.VMReplaced, ep.BootSeconds = nil, "", 0, false, 0
	sameJSON(t, "active episode", oldEpisode{ep, url}, apiEpisode(ep, url))
}

func TestWirePools(t *testing.T) {
	ps := []pool.PoolStatus{{PoolConfig: pool.PoolConfig{Name: "desktop", Image: "desktop", MemoryMiB: 1024, VCPUs: 2,
		Width: 1280, Height: 800, MinWarm: 1, Max: 4, ScreenshotSize: "auto", DefaultTTL: 1800, MaxTTL: 86400.5},
		Warm: 1, Leased: 2, Booting: 3, Ending: 4}}
	type oldList struct {
		Pools []pool.PoolStatus `json:"pools"`
	}
	sameJSON(t, "pools", oldList{ps}, apiPools(ps))
	sameJSON(t, "no pools", oldList{[]pool.PoolStatus{}}, apiPools([]pool.PoolStatus{}))
	sameJSON(t, "nil pools", oldList{nil}, apiPools(nil))
}

func TestWireActionsResponse(t *testing.T) {
	res := actions.Result{Text: "X=1,Y=2", Image: &actions.Image{MediaType: "image/png", Data: "iVBO", Width: 1024, Height: 640},
		Executed: 3, Settle: 250 * time.Millisecond, SettleMS: 250, SettleTimedOut: true, SettleGuestBusy: 2, Clipboard: new("Grüße")}
	type oldResponse struct {
		Content []actions.ContentBlock `json:"content"`
		actions.Result
		ScreenshotWidth  int     `json:"screenshot_width"`
		ScreenshotHeight int     `json:"screenshot_height"`
		DurationMS       float64 `json:"duration_ms"`
	}
	took := 312500 * time.Microsecond
	old := oldResponse{Content: res.ClaudeContent(), Result: res, ScreenshotWidth: 1024, ScreenshotHeight: 640, DurationMS: 312.5}
	sameJSON(t, "actions response", old, actionsResponse(res, 1024, 640, took))
	empty := actions.Result{}
	old = oldResponse{Content: empty.ClaudeContent(), Result: empty, DurationMS: 312.5}
	sameJSON(t, "empty actions response", old, actionsResponse(empty, 0, 0, took))
}

func TestWireRunOptions(t *testing.T) {
	in := `{"settle_quiet_ms":100,"settle_max_ms":2000,"no_settle":true,"no_guest_settle":true,"screenshot":"never","format":"jpeg","jpeg_quality":80}`
	var old actions.RunOptions
	var conv api.RunOptions
	if err := json.Unmarshal([]byte(in), &old); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(in), &conv); err != nil {
		t.Fatal(err)
	}
	if got := runOptions(conv); got != old {
		t.Errorf("runOptions = %+v, want %+v", got, old)
	}
}

// Every code the server sends is one api knows, with the status it had.
func TestSentinelCodesKnown(t *testing.T) {
	known := map[string]bool{}
	for _, c := range api.Codes() {
		known[c] = true
	}
	for _, s := range sentinels {
		if !known[s.code] {
			t.Errorf("sentinel %v maps to %q, which api does not list", s.err, s.code)
		}
	}
}
