package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
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
	if m := fill.Missing(vm, got); len(m) != 0 {
		t.Errorf("vmm.VM fields api.VM lacks: %v", m)
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
	if m := fill.Missing(vmm.CreateOptions{}, in); len(m) != 0 {
		t.Errorf("vmm.CreateOptions fields api.CreateOptions lacks: %v", m)
	}
}

func TestWireEpisode(t *testing.T) {
	var ep pool.Episode
	fill.All(&ep)
	got := apiEpisode(ep, "http://h/vms/a1", "127.0.0.1:5000:9222:5901:8080")
	if z := fill.Zeros(got); len(z) != 0 {
		t.Errorf("api.Episode fields not converted from pool.Episode: %v", z)
	}
	if m := fill.Mismatches(ep, got); len(m) != 0 {
		t.Errorf("api.Episode fields that differ from pool.Episode's: %v", m)
	}
	if m := fill.Missing(ep, got); len(m) != 0 {
		t.Errorf("pool.Episode fields api.Episode lacks: %v", m)
	}
}

func TestWirePools(t *testing.T) {
	var p pool.PoolStatus
	fill.All(&p)
	got := apiPools([]pool.PoolStatus{p})
	if len(got.Pools) != 1 {
		t.Fatalf("%d pools", len(got.Pools))
	}
	if z := fill.Zeros(got.Pools[0]); len(z) != 0 {
		t.Errorf("api.Pool fields not converted from pool.PoolStatus: %v", z)
	}
	if m := fill.Mismatches(p, got.Pools[0]); len(m) != 0 {
		t.Errorf("api.Pool fields that differ from pool.PoolStatus': %v", m)
	}
	// The TTLs are renamed for their unit.
	if m := fill.Missing(p, got.Pools[0], "DefaultTTL", "MaxTTL"); len(m) != 0 {
		t.Errorf("pool.PoolStatus fields api.Pool lacks: %v", m)
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
	var res actions.Result
	fill.All(&res)
	out := actionsResponse(res, 1024, 640, 312500*time.Microsecond)
	// Set by callResponse and the guest routes, not from the result.
	if z := fill.Zeros(out, "ToolUseID", "IsError", "ToolResults", "ComputerCallOutput", "Terminal", "Guest", "Content"); len(z) != 0 {
		t.Errorf("api.ActionsResponse fields not converted from actions.Result: %v", z)
	}
	if m := fill.Mismatches(res, out); len(m) != 0 {
		t.Errorf("api.ActionsResponse fields that differ from actions.Result's: %v", m)
	}
	// Settle is sent as SettleMS.
	if m := fill.Missing(res, out, "Settle"); len(m) != 0 {
		t.Errorf("actions.Result fields api.ActionsResponse lacks: %v", m)
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
	b, _ = json.Marshal(actionsResponse(actions.Result{}, 0, 0, 0))
	if !bytes.Contains(b, []byte(`"content":null`)) {
		t.Errorf("empty result: %s", b)
	}
}

func TestWireToolResult(t *testing.T) {
	res := actions.Result{Text: "done", Image: &actions.Image{MediaType: "image/png", Data: "iVBO"}}
	tr, err := apiToolResult(actions.ClaudeToolResult("tu_1", res, nil))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(tr)
	want := `{"type":"tool_result","tool_use_id":"tu_1","content":[{"type":"text","text":"done"},` +
		`{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBO"}}]}`
	if string(b) != want {
		t.Errorf("tool_result %s\nwant        %s", b, want)
	}
	tr, _ = apiToolResult(actions.ClaudeToolResult("tu_2", res, errors.New("boom")))
	if b, _ := json.Marshal(tr); string(b) != `{"type":"tool_result","tool_use_id":"tu_2","content":[{"type":"text","text":"boom"}],"is_error":true}` {
		t.Errorf("error tool_result %s", b)
	}
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
