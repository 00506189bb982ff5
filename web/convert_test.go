package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/internal/fill"
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

// Every field of the core type reaches the wire: the source is filled by
// reflection, so a field added to vmm.VM and not converted is a zero here,
// and a field converted from the wrong one a mismatch.
func TestWireVM(t *testing.T) {
	var vm vmm.VM
	fill.All(&vm)
	for _, p := range fill.Converted(vm, apiVM(vm), fill.Skip{}) {
		t.Error(p)
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
	for _, p := range fill.Converted(in, vmmCreateOptions(in), fill.Skip{}) {
		t.Error(p)
	}
	// And every vmm option has its api field.
	if m := fill.Missing(vmm.CreateOptions{}, in); len(m) != 0 {
		t.Errorf("vmm.CreateOptions fields api.CreateOptions lacks: %v", m)
	}
}

func TestWireEpisode(t *testing.T) {
	var ep pool.Episode
	fill.All(&ep)
	for _, p := range fill.Converted(ep, apiEpisode(ep, "http://h/vms/a1", "127.0.0.1:5000:9222:5901:8080"),
		// A cluster agent's front door sets where the episode lives.
		// And whether it is recorded (episodeResponse, from the trajectories).
		fill.Skip{Unset: []string{"Node", "URL", "Recording", "TrajectoryURL"}}) {
		t.Error(p)
	}
}

func TestWirePools(t *testing.T) {
	var p pool.PoolStatus
	fill.All(&p)
	got := apiPools([]pool.PoolStatus{p})
	if len(got.Pools) != 1 {
		t.Fatalf("%d pools", len(got.Pools))
	}
	// The TTLs are renamed for their unit.
	for _, pr := range fill.Converted(p, got.Pools[0], fill.Skip{Renamed: []string{"DefaultTTL", "MaxTTL"}}) {
		t.Error(pr)
	}
	if got.Pools[0].DefaultTTLS != float64(p.DefaultTTL) || got.Pools[0].MaxTTLS != float64(p.MaxTTL) {
		t.Errorf("TTLs %v, %v from %v, %v", got.Pools[0].DefaultTTLS, got.Pools[0].MaxTTLS, p.DefaultTTL, p.MaxTTL)
	}
	// [] stays [] and nil stays null, as pool.Manager.Pools sends them.
	if b, _ := json.Marshal(apiPools([]pool.PoolStatus{})); string(b) != `{"pools":[]}` {
		t.Errorf("no pools: %s", b)
	}
	if b, _ := json.Marshal(apiPools(nil)); string(b) != `{"pools":null}` {
		t.Errorf("nil pools: %s", b)
	}
}

func TestWireActionsResponse(t *testing.T) {
	var res player.Result
	fill.All(&res)
	out := actionsResponse(res, 1024, 640, 312500*time.Microsecond)
	// Set by callResponse and the guest routes, not from the result;
	// Settle is sent as SettleMS; Content is checked below.
	for _, p := range fill.Converted(res, out, fill.Skip{Unset: []string{"ToolUseID", "IsError", "ToolResults", "ComputerCallOutput", "Terminal", "Guest", "Content"},
		Renamed: []string{"Settle"}}) {
		t.Error(p)
	}
	if out.DurationMS != 312.5 {
		t.Errorf("duration_ms %v", out.DurationMS)
	}
	// The content is a Claude tool_result's, in the shape it always had.
	b, _ := json.Marshal(out.Content)
	want := `[{"type":"text","text":"` + res.Text + `"},{"type":"image","source":{"type":"base64","media_type":"` +
		res.Image.MediaType + `","data":"` + res.Image.Data + `"}}]`
	if string(b) != want {
		t.Errorf("content %s\nwant    %s", b, want)
	}
	b, _ = json.Marshal(actionsResponse(player.Result{}, 0, 0, 0))
	if !bytes.Contains(b, []byte(`"content":null`)) {
		t.Errorf("empty result: %s", b)
	}
}

func TestWireToolResult(t *testing.T) {
	res := player.Result{Text: "done", Image: &player.Image{MediaType: "image/png", Data: "iVBO"}}
	tr, err := apiToolResult(vocab.ClaudeToolResult("tu_1", res, nil))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(tr)
	want := `{"type":"tool_result","tool_use_id":"tu_1","content":[{"type":"text","text":"done"},` +
		`{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBO"}}]}`
	if string(b) != want {
		t.Errorf("tool_result %s\nwant        %s", b, want)
	}
	tr, _ = apiToolResult(vocab.ClaudeToolResult("tu_2", res, errors.New("boom")))
	if b, _ := json.Marshal(tr); string(b) != `{"type":"tool_result","tool_use_id":"tu_2","content":[{"type":"text","text":"boom"}],"is_error":true}` {
		t.Errorf("error tool_result %s", b)
	}
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

// The core types carry no json tags: their wire form is package api's, and
// a tag on them would be a second spelling of it (the pool's state file has
// its own record type).
func TestCoreTypesHaveNoWireTags(t *testing.T) {
	for _, v := range []any{vmm.VM{}, vmm.CreateOptions{}, vmm.Forward{}, vmm.ExecResult{},
		pool.Episode{}, pool.PoolStatus{}, pool.MemberStatus{}, pool.PoolConfig{}, pool.Config{}} {
		ty := reflect.TypeOf(v)
		for i := range ty.NumField() {
			if tag, ok := ty.Field(i).Tag.Lookup("json"); ok {
				t.Errorf("%s.%s has json tag %q", ty, ty.Field(i).Name, tag)
			}
		}
	}
}

func TestWireSnapshot(t *testing.T) {
	var s vmm.Snapshot
	fill.All(&s)
	s.Took = 1500 * time.Millisecond // fill's few nanoseconds are 0 ms
	out := apiSnapshot(s)
	for _, p := range fill.Converted(s, out, fill.Skip{Renamed: []string{"Created", "Took"}}) {
		t.Error(p)
	}
	if want := s.Created.UTC().Format(time.RFC3339); out.CreatedAt != want {
		t.Errorf("created_at %q, want %q", out.CreatedAt, want)
	}
	if out.SaveMS != s.Took.Milliseconds() || out.SaveMS == 0 {
		t.Errorf("save_ms %d from took %v", out.SaveMS, s.Took)
	}
}
