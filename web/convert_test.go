package web

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/player"
	"github.com/deskfarm/deskfarm/pool"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/vocab"
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

func TestWireVM(t *testing.T) {
	vm := vmm.VM{ID: "a1", Domain: "deskfarm-a1", Image: "desktop", ImageHash: "abc", State: vmm.StateReady,
		MemoryMiB: 1024, VCPUs: 2, Width: 1280, Height: 800, Accel: "kvm",
		CreatedAt: time.Date(2026, 11, 30, 7, 0, 0, 123, time.UTC), BootSeconds: 3.5, Start: vmm.StartSavedState,
		VNCSocket: "/var/lib/deskfarm/vms/a1/vnc.sock", Resets: 4, Labels: map[string]string{"pool": "desktop"}}
	sameJSON(t, "vm", vm, apiVM(vm))
	vm.Labels = nil
	sameJSON(t, "vm without labels", vm, apiVM(vm))
}

func TestWireCreateOptions(t *testing.T) {
	in := `{"image":"tiny","memory_mib":512,"vcpus":1,"boot":true,"width":1024,"height":768,"labels":{"k":"v"}}`
	var old vmm.CreateOptions
	var conv api.CreateOptions
	if err := json.Unmarshal([]byte(in), &old); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(in), &conv); err != nil {
		t.Fatal(err)
	}
	sameJSON(t, "create options", old, vmmCreateOptions(conv))
	sameJSON(t, "create options (api)", old, conv)
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
	res := player.Result{Text: "X=1,Y=2", Image: &player.Image{MediaType: "image/png", Data: "iVBO", Width: 1024, Height: 640},
		Executed: 3, Settle: 250 * time.Millisecond, SettleMS: 250, SettleTimedOut: true, SettleGuestBusy: 2, Clipboard: new("Grüße")}
	type oldResponse struct {
		Content []vocab.ContentBlock `json:"content"`
		player.Result
		ScreenshotWidth  int     `json:"screenshot_width"`
		ScreenshotHeight int     `json:"screenshot_height"`
		DurationMS       float64 `json:"duration_ms"`
	}
	took := 312500 * time.Microsecond
	old := oldResponse{Content: vocab.ClaudeContent(res), Result: res, ScreenshotWidth: 1024, ScreenshotHeight: 640, DurationMS: 312.5}
	sameJSON(t, "actions response", old, actionsResponse(res, 1024, 640, took))
	empty := player.Result{}
	old = oldResponse{Content: vocab.ClaudeContent(empty), Result: empty, DurationMS: 312.5}
	sameJSON(t, "empty actions response", old, actionsResponse(empty, 0, 0, took))
}

func TestWireRunOptions(t *testing.T) {
	in := `{"settle_quiet_ms":100,"settle_max_ms":2000,"no_settle":true,"no_guest_settle":true,"screenshot":"never","format":"jpeg","jpeg_quality":80}`
	var old player.RunOptions
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
