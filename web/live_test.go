package web

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/pool"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/vmm/vmmtest"
)

// liveFeed reads GET /v1/live's messages.
type liveFeed struct {
	t    *testing.T
	msgs chan api.FarmState
}

func openLive(t *testing.T, url string, header ...string) *liveFeed {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", url+"/v1/live", nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET /v1/live: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	f := &liveFeed{t: t, msgs: make(chan api.FarmState, 64)}
	t.Cleanup(func() { cancel(); resp.Body.Close() })
	go func() {
		defer close(f.msgs)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		event := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: ") && event == "farm":
				var st api.FarmState
				if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &st); err != nil {
					t.Errorf("live message %q: %v", line, err)
				}
				f.msgs <- st
			}
		}
	}()
	return f
}

// until reads messages until one satisfies cond; a feed that goes quiet
// for 10 s fails the test.
func (f *liveFeed) until(what string, cond func(api.FarmState) bool) api.FarmState {
	f.t.Helper()
	var last api.FarmState
	for {
		select {
		case st, ok := <-f.msgs:
			if !ok {
				f.t.Fatalf("the feed ended while waiting for %s; last %+v", what, last)
			}
			if cond(st) {
				return st
			}
			last = st
		case <-time.After(10 * time.Second):
			f.t.Fatalf("no message with %s; last %+v", what, last)
		}
	}
}

func liveVM(st api.FarmState, id string) (api.LiveVM, bool) {
	for _, v := range st.VMs {
		if v.ID == id {
			return v, true
		}
	}
	return api.LiveVM{}, false
}

// The feed follows the farm: a VM created after the reader connected, a
// warm pool's counts, an episode with its VM and expiry, a person taking
// control, the episode's end and the VM's destruction, each in a message
// of its own, to a viewer token.
func TestLiveFeedFollowsTheFarm(t *testing.T) {
	srv, _, _ := stillPoolFarm(t, pool.PoolConfig{Name: "p", Image: "tiny", MemoryMiB: 256, VCPUs: 1, MinWarm: 1, Max: 2},
		Options{ViewerToken: "view-secret"})

	feed := openLive(t, srv.URL, "Authorization", "Bearer view-secret")
	st := feed.until("the warm pool", func(st api.FarmState) bool {
		return len(st.Pools) == 1 && st.Pools[0].Warm == 1
	})
	if st.Seq == 0 || st.At.IsZero() {
		t.Errorf("message without seq or time: %+v", st)
	}

	code, b := send(t, "POST", srv.URL+"/v1/vms", `{"image":"tiny"}`)
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, b)
	}
	var vm api.VM
	json.Unmarshal(b, &vm)
	feed.until("the new VM, ready", func(st api.FarmState) bool {
		v, ok := liveVM(st, vm.ID)
		return ok && v.State == "ready" && v.Pool == ""
	})

	code, b = send(t, "POST", srv.URL+"/v1/episodes", `{"ttl_s":600}`)
	if code != http.StatusCreated {
		t.Fatalf("start episode: %d %s", code, b)
	}
	var ep api.Episode
	json.Unmarshal(b, &ep)
	st = feed.until("the episode and its lease", func(st api.FarmState) bool {
		v, _ := liveVM(st, ep.VM)
		return len(st.Episodes) == 1 && st.Pools[0].Leased == 1 && v.Episode == ep.ID
	})
	if got := st.Episodes[0]; got.ID != ep.ID || got.VM != ep.VM || !got.ExpiresAt.Equal(ep.ExpiresAt) {
		t.Errorf("live episode %+v, want %s on %s expiring %v", got, ep.ID, ep.VM, ep.ExpiresAt)
	}

	code, b = send(t, "POST", srv.URL+"/v1/vms/"+vm.ID+"/control", "")
	if code != http.StatusCreated {
		t.Fatalf("take control: %d %s", code, b)
	}
	feed.until("the person in control", func(st api.FarmState) bool {
		v, _ := liveVM(st, vm.ID)
		return v.Human
	})

	if code, b := send(t, "DELETE", srv.URL+"/v1/episodes/"+ep.ID, ""); code != http.StatusOK {
		t.Fatalf("end episode: %d %s", code, b)
	}
	feed.until("the episode gone", func(st api.FarmState) bool { return len(st.Episodes) == 0 && st.Pools[0].Leased == 0 })
	if code, b := send(t, "DELETE", srv.URL+"/v1/vms/"+vm.ID, ""); code != http.StatusNoContent {
		t.Fatalf("destroy: %d %s", code, b)
	}
	feed.until("the VM gone", func(st api.FarmState) bool { _, ok := liveVM(st, vm.ID); return !ok })
}

// A reader that never reads does not hold the hub up: another reader
// still gets every change while the stalled one's socket is full (500 VMs
// make each message some 300 KB; 30 of them outgrow loopback's buffers).
func TestLiveFeedSlowReaderDoesNotBlock(t *testing.T) {
	farm := vmmtest.New()
	srv := httptest.NewServer(NewServer(farm, Options{Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(func() { srv.Close(); farm.Close() })
	const many = 500
	for range many {
		if _, err := farm.Create(context.Background(), vmm.CreateOptions{Image: "tiny"}); err != nil {
			t.Fatal(err)
		}
	}
	// The stalled reader: connected, never read.
	req, _ := http.NewRequest("GET", srv.URL+"/v1/live", nil)
	stalled, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Body.Close()
	feed := openLive(t, srv.URL)
	for i := range 30 {
		vm, err := farm.Create(context.Background(), vmm.CreateOptions{Image: "tiny"})
		if err != nil {
			t.Fatal(err)
		}
		feed.until("VM "+vm.ID, func(st api.FarmState) bool { _, ok := liveVM(st, vm.ID); return ok && len(st.VMs) == many+i+1 })
	}
}
