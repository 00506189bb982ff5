package web

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/png"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/api"

	"github.com/gorilla/websocket"

	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/pool"
	"github.com/deskfarm/deskfarm/trajectory"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/vmm/vmmtest"
	"github.com/deskfarm/deskfarm/vnc/vnctest"
)

// stillDisplay is a desk.Display of a still 640x400 screen that keeps
// what a guest would of input: the keys and buttons held down.
type stillDisplay struct {
	vnctest.Still
	mu      sync.Mutex
	held    map[uint32]bool
	buttons uint8
}

// guest returns how many keys and which buttons the guest holds.
func (s *stillDisplay) guest() (int, uint8) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held), s.buttons
}

func (s *stillDisplay) Size() (int, int)         { return 640, 400 }
func (s *stillDisplay) SnapshotRaw() *image.RGBA { return image.NewRGBA(image.Rect(0, 0, 640, 400)) }
func (s *stillDisplay) Snapshot() *image.RGBA    { return s.SnapshotRaw() }
func (s *stillDisplay) CursorPos() (int, int)    { return 0, 0 }
func (s *stillDisplay) Settle(context.Context, time.Duration, time.Duration) (time.Duration, error) {
	return 0, nil
}

func (s *stillDisplay) Pointer(_, _ int, b uint8) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buttons = b
	return nil
}

func (s *stillDisplay) Key(keysym uint32, _ uint16, down bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held == nil {
		s.held = map[uint32]bool{}
	}
	if down {
		s.held[keysym] = true
	} else {
		delete(s.held, keysym)
	}
	return nil
}

// deskServer is a server with desks over fake displays on a fake farm
// with one ready VM, vm1.
func deskServer(t *testing.T, opts Options) (*httptest.Server, *vmmtest.Farm) {
	srv, farm, _ := deskServerDisplay(t, opts)
	return srv, farm
}

// deskServerDisplay is deskServer that also returns vm1's display.
func deskServerDisplay(t *testing.T, opts Options) (*httptest.Server, *vmmtest.Farm, *stillDisplay) {
	t.Helper()
	farm := vmmtest.New()
	if _, err := farm.Create(context.Background(), vmm.CreateOptions{Image: "tiny"}); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	disp := &stillDisplay{}
	desks := desk.New(farm, desk.Options{Log: log, Dial: func(context.Context, vmm.VM, *slog.Logger) (desk.Display, error) {
		return disp, nil
	}})
	opts.Desks, opts.Logger = desks, log
	srv := httptest.NewServer(NewServer(farm, opts))
	t.Cleanup(func() { srv.Close(); desks.Close(); farm.Close() })
	return srv, farm, disp
}

// rfbTakeover opens the VNC websocket with a control token and completes
// the RFB 3.8 handshake (RFC 6143 7.1-7.3) as noVNC does.
func rfbTakeover(t *testing.T, srv *httptest.Server, token string) *websocket.Conn {
	t.Helper()
	url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/v1/vms/vm1/vnc?control_token=" + token
	c, _, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	var in []byte
	read := func(n int) {
		for len(in) < n {
			_, b, err := c.ReadMessage()
			if err != nil {
				t.Fatalf("rfb handshake: %v", err)
			}
			in = append(in, b...)
		}
		in = in[n:]
	}
	send := func(b ...byte) {
		if err := c.WriteMessage(websocket.BinaryMessage, b); err != nil {
			t.Fatal(err)
		}
	}
	read(12) // ProtocolVersion
	send([]byte("RFB 003.008\n")...)
	read(2) // one security type: None
	send(1)
	read(4) // SecurityResult OK
	send(1) // ClientInit, shared
	read(24 + len("deskfarm"))
	return c
}

func waitGuest(t *testing.T, disp *stillDisplay, what string, keys int, buttons uint8) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		k, b := disp.guest()
		if k == keys && b == buttons {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the guest holds %d keys and buttons %b, want %d and %b", what, k, b, keys, buttons)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestTakeoverKeysReleased(t *testing.T) {
	srv, _, disp := deskServerDisplay(t, Options{})
	vm := srv.URL + "/v1/vms/vm1"
	take := func() string {
		code, b := send(t, "POST", vm+"/control", "")
		var cr ControlResponse
		if json.Unmarshal(b, &cr); code != http.StatusCreated || cr.ControlToken == "" {
			t.Fatalf("take control: %d %s", code, b)
		}
		return cr.ControlToken
	}
	hold := func(c *websocket.Conn) {
		// KeyEvent down Shift_L, PointerEvent left button down at (10, 10).
		for _, m := range [][]byte{{4, 1, 0, 0, 0, 0, 0xff, 0xe1}, {5, 1, 0, 10, 0, 10}} {
			if err := c.WriteMessage(websocket.BinaryMessage, m); err != nil {
				t.Fatal(err)
			}
		}
	}

	// The person disconnects holding a key and a button.
	c := rfbTakeover(t, srv, take())
	hold(c)
	waitGuest(t, disp, "the person pressed", 1, 1)
	c.Close()
	waitGuest(t, disp, "after the person disconnected", 0, 0)

	// The person is replaced by another.
	c = rfbTakeover(t, srv, take())
	defer c.Close()
	hold(c)
	waitGuest(t, disp, "the person pressed", 1, 1)
	take()
	waitGuest(t, disp, "after another person took control", 0, 0)

	// The person hands control back.
	c2 := rfbTakeover(t, srv, take())
	defer c2.Close()
	hold(c2)
	waitGuest(t, disp, "the person pressed", 1, 1)
	if code, b := send(t, "DELETE", vm+"/control", ""); code != http.StatusNoContent {
		t.Fatalf("hand back: %d %s", code, b)
	}
	waitGuest(t, disp, "after the person handed control back", 0, 0)
}

func send(t *testing.T, method, url, body string) (int, []byte) {
	t.Helper()
	ctype := ""
	if body != "" {
		ctype = "application/json"
	}
	return sendType(t, method, url, body, ctype)
}

func sendType(t *testing.T, method, url, body, ctype string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func TestStreamCapsAndCloseOnDeath(t *testing.T) {
	srv, farm := deskServer(t, Options{MaxViewersPerVM: 2})
	url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/v1/vms/vm1/stream"
	var conns []*websocket.Conn
	for range 2 {
		c, _, err := websocket.DefaultDialer.Dial(url, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, _, err := c.ReadMessage(); err != nil {
			t.Fatalf("first frame: %v", err)
		}
		conns = append(conns, c)
	}
	_, resp, err := websocket.DefaultDialer.Dial(url, nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("third viewer over a cap of 2: err %v, response %v; want 429", err, resp)
	}
	var body ErrorResponse
	json.NewDecoder(resp.Body).Decode(&body)
	if body.Error.Code != api.CodeTooManyViewers {
		t.Errorf("third viewer: code %q, want %s", body.Error.Code, api.CodeTooManyViewers)
	}

	// The VM dies: every viewer gets a close that says so.
	farm.Kill("vm1", "crashed")
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _, err := c.ReadMessage()
		ce, ok := err.(*websocket.CloseError)
		if !ok || ce.Code != websocket.CloseGoingAway || !strings.Contains(ce.Text, "crashed") {
			t.Errorf("viewer %d after the VM died: %v, want a going-away close naming the crash", i, err)
		}
	}
}

func TestActivityFeedEndsOnDeath(t *testing.T) {
	srv, farm := deskServer(t, Options{})
	vm := srv.URL + "/v1/vms/vm1"
	if code, b := send(t, "POST", vm+"/actions", `{"action":{"kind":"click","x":5,"y":6},"screenshot":"never"}`); code != http.StatusOK {
		t.Fatalf("action: %d %s", code, b)
	}
	resp, err := http.Get(vm + "/activity")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	next := func() string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("feed ended early")
			}
			return l
		case <-time.After(5 * time.Second):
			t.Fatal("no feed line in 5s")
		}
		return ""
	}
	for l := next(); !strings.HasPrefix(l, "data: "); l = next() {
	}
	farm.Kill("vm1", "crashed")
	for l := next(); l != "event: closed"; l = next() {
	}
	if l := next(); !strings.Contains(l, "crashed") {
		t.Errorf("closing event %q does not say why", l)
	}
	select {
	case _, ok := <-lines:
		for ok {
			_, ok = <-lines
		}
	case <-time.After(5 * time.Second):
		t.Error("feed still open 5s after the VM died")
	}
}

func TestManualResetHandsControlBack(t *testing.T) {
	srv, _ := deskServer(t, Options{})
	vm := srv.URL + "/v1/vms/vm1"
	if code, b := send(t, "POST", vm+"/control", ""); code != http.StatusCreated {
		t.Fatalf("take control: %d %s", code, b)
	}
	if code, b := send(t, "POST", vm+"/actions", `{"action":{"kind":"click","x":1,"y":1}}`); code != http.StatusConflict || !strings.Contains(string(b), CodeHumanControl) {
		t.Fatalf("agent action under human control: %d %s", code, b)
	}
	if code, b := send(t, "POST", vm+"/reset", ""); code != http.StatusOK {
		t.Fatalf("reset: %d %s", code, b)
	}
	// The reset reaches the desk as a lifecycle event, as an episode's end
	// does; the reset answers once the desk has applied it.
	_, b := send(t, "GET", vm+"/control", "")
	var st ControlStatus
	if json.Unmarshal(b, &st); st.Human {
		t.Fatalf("a person still holds control after the reset: %s", b)
	}
	if code, b := send(t, "POST", vm+"/actions", `{"action":{"kind":"click","x":1,"y":1},"screenshot":"never"}`); code != http.StatusOK {
		t.Errorf("agent action after the reset: %d %s", code, b)
	}
}

func TestEpisodeRoutesUseTheEpisodesDefaults(t *testing.T) {
	srv, ep := startEpisodeOnStill(t)
	epURL := srv.URL + "/v1/episodes/" + ep.ID

	size := func(query string) image.Point {
		t.Helper()
		code, b := send(t, "GET", epURL+"/screenshot?format=png"+query, "")
		if code != http.StatusOK {
			t.Fatalf("screenshot%s: %d %s", query, code, b)
		}
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		return img.Bounds().Size()
	}
	if got := size(""); got != image.Pt(320, 200) {
		t.Errorf("episode screenshot is %v, want the pool's 320x200", got)
	}
	if got := size("&size=native"); got != image.Pt(640, 400) {
		t.Errorf("episode screenshot with size=native is %v, want 640x400", got)
	}
	code, b := send(t, "POST", epURL+"/actions", `{"action":{"kind":"click","x":1,"y":1},"screenshot":"never"}`)
	var ar ActionsResponse
	json.Unmarshal(b, &ar)
	if code != http.StatusOK || ar.ScreenshotWidth != 320 || ar.ScreenshotHeight != 200 {
		t.Errorf("episode actions: %d, coordinate space %dx%d; want 200 and the pool's 320x200 (%s)", code, ar.ScreenshotWidth, ar.ScreenshotHeight, b)
	}
	code, b = send(t, "POST", epURL+"/actions", `{"screenshot_size":"native","action":{"kind":"click","x":1,"y":1},"screenshot":"never"}`)
	json.Unmarshal(b, &ar)
	if code != http.StatusOK || ar.ScreenshotWidth != 640 {
		t.Errorf("episode actions with native size: %d, width %d; want 640 (%s)", code, ar.ScreenshotWidth, b)
	}

	// Ending the episode resets the VM: the same semantics as a manual
	// reset, applied before the end answers.
	vmURL := srv.URL + "/v1/vms/" + ep.VM
	if code, b := send(t, "POST", vmURL+"/control", ""); code != http.StatusCreated {
		t.Fatalf("take control: %d %s", code, b)
	}
	if code, b := send(t, "DELETE", epURL, ""); code != http.StatusOK {
		t.Fatalf("end episode: %d %s", code, b)
	}
	_, b = send(t, "GET", vmURL+"/control", "")
	var st ControlStatus
	if json.Unmarshal(b, &st); st.Human {
		t.Errorf("a person still holds control of the VM after its episode ended: %s", b)
	}
}

// A warm pool VM that no episode leases refuses every change with 409
// not_leased (issue 9: the next episode must not lease it dirty); reads
// still work, and once leased the same calls go through.
func TestUnleasedPoolVMRefusesChanges(t *testing.T) {
	srv, _, pools := stillPoolFarm(t, pool.PoolConfig{Name: "p", Image: "tiny", MemoryMiB: 256, VCPUs: 1, MinWarm: 1, Max: 1}, Options{})

	var warm string
	for deadline := time.Now().Add(5 * time.Second); warm == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, m := range pools.Pools()[0].VMs {
			if m.State == "warm" {
				warm = m.VM
			}
		}
	}
	if warm == "" {
		t.Fatalf("no warm VM: %+v", pools.Pools())
	}
	vmURL := srv.URL + "/v1/vms/" + warm
	for _, c := range []struct{ method, path, body, ctype string }{
		{"POST", "/actions", `{"action":{"kind":"click","x":1,"y":1},"screenshot":"never"}`, "application/json"},
		{"POST", "/exec", `{"argv":["true"]}`, "application/json"},
		{"PUT", "/files?path=/tmp/x", "data", "application/octet-stream"},
		{"POST", "/control", "", ""},
	} {
		code, b := sendType(t, c.method, vmURL+c.path, c.body, c.ctype)
		var e struct{ Error api.ErrorBody }
		json.Unmarshal(b, &e)
		if code != http.StatusConflict || e.Error.Code != api.CodeNotLeased || !strings.Contains(e.Error.Message, warm) {
			t.Errorf("%s %s on a warm VM: %d %s; want 409 not_leased naming the VM", c.method, c.path, code, b)
		}
	}
	if code, b := send(t, "GET", vmURL+"/screenshot", ""); code != http.StatusOK {
		t.Errorf("screenshot of a warm VM: %d %s; reads stay open", code, b)
	}
	if m := pools.Pools()[0].VMs[0]; m.Dirty {
		t.Errorf("refused calls marked the warm VM dirty: %+v", m)
	}

	code, b := send(t, "POST", srv.URL+"/v1/episodes", `{}`)
	var ep EpisodeResponse
	if json.Unmarshal(b, &ep); code != http.StatusCreated || ep.VM != warm || !ep.CleanStart {
		t.Fatalf("start episode: %d %s; want the warm VM %s, clean", code, b, warm)
	}
	if code, b := send(t, "POST", srv.URL+"/v1/episodes/"+ep.ID+"/exec", `{"argv":["true"]}`); code != http.StatusOK {
		t.Errorf("exec on the episode: %d %s", code, b)
	}
	if code, b := send(t, "POST", vmURL+"/exec", `{"argv":["true"]}`); code != http.StatusOK {
		t.Errorf("exec on the leased VM's own route: %d %s", code, b)
	}
}

// startEpisodeOnStill serves a fake farm with one pool "p" (one warm tiny
// VM, screenshot size 320x200) whose desks show a still 640x400 screen, and
// starts an episode on it.
func startEpisodeOnStill(t *testing.T) (*httptest.Server, EpisodeResponse) {
	t.Helper()
	srv, _, _ := stillPoolFarm(t, pool.PoolConfig{Name: "p", Image: "tiny", MemoryMiB: 256, VCPUs: 1,
		MinWarm: 1, Max: 1, ScreenshotSize: "320x200"}, Options{})
	code, b := send(t, "POST", srv.URL+"/v1/episodes", `{}`)
	if code != http.StatusCreated {
		t.Fatalf("start episode: %d %s", code, b)
	}
	var ep EpisodeResponse
	json.Unmarshal(b, &ep)
	return srv, ep
}

// stillPoolFarm serves a fake farm with one pool of pc, whose desks show
// a still screen; opts adds to the server's options.
func stillPoolFarm(t *testing.T, pc pool.PoolConfig, opts Options) (*httptest.Server, *vmmtest.Farm, *pool.Manager) {
	t.Helper()
	srv, farm, pools, _ := poolFarm(t, pc, opts, false)
	return srv, farm, pools
}

// poolFarm is stillPoolFarm, with a trajectory store run on the pools
// when traj is set (trajectories_test.go).
func poolFarm(t *testing.T, pc pool.PoolConfig, opts Options, traj bool) (*httptest.Server, *vmmtest.Farm, *pool.Manager, *trajectory.Manager) {
	t.Helper()
	farm := vmmtest.New()
	cfg := pool.Config{Pools: []pool.PoolConfig{pc}}
	cfg.SetDefaults()
	log := slog.New(slog.DiscardHandler)
	pools, err := pool.New(context.Background(), farm, cfg, pool.Options{StateDir: t.TempDir(), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	desks := desk.New(farm, desk.Options{Log: log, Dial: func(context.Context, vmm.VM, *slog.Logger) (desk.Display, error) {
		return &stillDisplay{}, nil
	}})
	opts.Desks, opts.Pools, opts.Logger = desks, pools, log
	if traj {
		opts.Trajectories = runTrajectories(t, desks, poolEpisodes{pools})
	}
	srv := httptest.NewServer(NewServer(farm, opts))
	t.Cleanup(func() { srv.Close(); desks.Close(); pools.Close(); farm.Close() })
	return srv, farm, pools, opts.Trajectories
}
