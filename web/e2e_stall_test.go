package web_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/internal/testenv"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/web"
)

// stallBound bounds how long the test waits for an answer that must come
// while the other VM is mid-wait: a bound on the test, not a timing assert.
const stallBound = 20 * time.Second

// TestE2EResetDuringAnotherVMsWait: VM A runs a 100 s wait and is reset;
// VM B's reset (through the API, which answers once B's desk applied it)
// and B's death (kill -9 of its QEMU) reach B's desk and its viewer in the
// meantime, and A's request answers vm_reset at once instead of after
// 100 s. One farm-wide event loop held B's reset behind A's, so B's answer
// came after resetApplyWait with B's input still held.
func TestE2EResetDuringAnotherVMsWait(t *testing.T) {
	m := testenv.Manager(t, "tiny")
	desks := desk.NewPool(m, nil)
	srv := httptest.NewServer(web.NewServer(m, web.Options{Desks: desks}))
	t.Cleanup(func() { srv.Close(); desks.Close() })
	ctx := context.Background()
	a, err := m.Create(ctx, vmm.CreateOptions{Image: "tiny"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Create(ctx, vmm.CreateOptions{Image: "tiny"})
	if err != nil {
		t.Fatal(err)
	}
	post := func(vm, path, body string) (int, string) {
		t.Helper()
		cl := http.Client{Timeout: 3 * time.Minute}
		resp, err := cl.Post(srv.URL+"/v1/vms/"+vm+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Error(err)
			return 0, ""
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}

	// B: the agent holds Shift; a viewer watches.
	if st, body := post(b.ID, "/actions", `{"actions":[{"kind":"key_down","keys":["shift"]}],"screenshot":"never"}`); st != 200 {
		t.Fatalf("key_down on B: %d %s", st, body)
	}
	bd := desks.Peek(b.ID)
	v, err := bd.Watch(0)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()

	// A: a 100 s wait, in flight once A's desk has an executor.
	type answer struct {
		status int
		body   string
	}
	aDone := make(chan answer, 1)
	go func() {
		st, body := post(a.ID, "/actions", `{"actions":[{"kind":"wait","duration_ms":100000}],"screenshot":"never"}`)
		aDone <- answer{st, body}
	}()
	for deadline := time.Now().Add(stallBound); ; time.Sleep(10 * time.Millisecond) {
		if d := desks.Peek(a.ID); d != nil && len(d.Executors()) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("A's wait never started")
		}
	}
	time.Sleep(50 * time.Millisecond) // from executor to run is microseconds; not an assert

	// A's reset, then B's: B's reset event comes after A's.
	if st, body := post(a.ID, "/reset", ""); st != 200 {
		t.Fatalf("reset of A: %d %s", st, body)
	}
	if st, body := post(b.ID, "/reset", ""); st != 200 {
		t.Fatalf("reset of B: %d %s", st, body)
	}
	if ev, ok := bd.LastEvent(); !ok || ev.Kind != "reset" {
		t.Errorf("B's reset answered before B's desk applied it (last event %+v)", ev)
	}
	select {
	case r := <-aDone:
		var e web.ErrorResponse
		json.Unmarshal([]byte(r.body), &e)
		if r.status != http.StatusConflict || e.Error.Code != "vm_reset" {
			t.Errorf("A's wait under its reset: %d %s, want 409 vm_reset", r.status, r.body)
		}
	case <-time.After(stallBound):
		t.Fatal("A's 100 s wait goes on after A was reset")
	}

	// A waits again; B dies: B's viewer closes while A is still waiting.
	go func() {
		st, body := post(a.ID, "/actions", `{"actions":[{"kind":"wait","duration_ms":100000}],"screenshot":"never"}`)
		aDone <- answer{st, body}
	}()
	testenv.KillQEMU(t, b.ID)
	select {
	case <-v.Done():
	case <-time.After(stallBound):
		t.Fatal("B's viewer still open after B's QEMU was killed")
	}
	select {
	case r := <-aDone:
		t.Errorf("A's second wait answered (%d %s) before B's death reached B's viewer", r.status, r.body)
	default:
	}
	if err := m.Destroy(ctx, a.ID); err != nil {
		t.Error(err)
	}
	select {
	case r := <-aDone:
		if r.status == 200 {
			t.Errorf("A's wait answered 200 after A was destroyed under it: %s", r.body)
		}
	case <-time.After(stallBound):
		t.Fatal("A's wait goes on after A was destroyed")
	}
}
