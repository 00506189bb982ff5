package web

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/cluster"
	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/pool"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/vmm/vmmtest"
)

// The proxy's protocol edge (issue 15): two agents' front doors on
// loopback, A and B, each with its own pool on its own in-memory farm, and
// a fake cluster.Front per agent that places episodes of A's pool on A.
// What the apiserver decides (claims, Leases) is not here: the agents'
// E2E tests run those against a real one.

const (
	clusterCtl    = "ctl-secret"
	clusterViewer = "view-secret"
	clusterTok    = "cluster-secret"
)

// paintedDisplay is a still screen of one colour that counts the button
// presses it gets: which agent's VM an action reached.
type paintedDisplay struct {
	stillDisplay
	c       color.RGBA
	presses atomic.Int32
}

func (d *paintedDisplay) SnapshotRaw() *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, 640, 400))
	draw.Draw(img, img.Bounds(), &image.Uniform{d.c}, image.Point{}, draw.Src)
	return img
}

func (d *paintedDisplay) Snapshot() *image.RGBA { return d.SnapshotRaw() }

func (d *paintedDisplay) Pointer(x, y int, b uint8) error {
	if b != 0 {
		d.presses.Add(1)
	}
	return d.stillDisplay.Pointer(x, y, b)
}

// fakeFront is an agent's cluster.Front: episodes of owner's pool live on
// node ownerNode at ownerURL; Claim leases there; Bind leases locally.
type fakeFront struct {
	node      string
	owner     *pool.Manager // nil: no episode is elsewhere
	ownerNode string
	ownerURL  string
	local     *pool.Manager

	lost     atomic.Bool // the owner's node stopped renewing its Lease
	claimErr error
	health   cluster.Health

	mu    sync.Mutex
	binds []cluster.BindRequest
}

func (f *fakeFront) Node() string { return f.node }

func (f *fakeFront) Health() cluster.Health { return f.health }

func (f *fakeFront) Claim(ctx context.Context, poolName string, ttl time.Duration) (cluster.Placement, pool.Episode, error) {
	if f.claimErr != nil {
		return cluster.Placement{}, pool.Episode{}, fmt.Errorf("claim a desktop of pool %s: %w", poolName, f.claimErr)
	}
	ep, err := f.owner.Start(ctx, poolName, ttl)
	if err != nil {
		return cluster.Placement{}, pool.Episode{}, err
	}
	return f.placement(ep), ep, nil
}

func (f *fakeFront) placement(ep pool.Episode) cluster.Placement {
	return cluster.Placement{Episode: ep.ID, Desktop: f.ownerNode + "." + ep.VM, Node: f.ownerNode, URL: f.ownerURL,
		VM: ep.VM, Pool: ep.Pool, ExpiresAt: ep.ExpiresAt}
}

func (f *fakeFront) Locate(id string) (cluster.Placement, error) {
	if f.owner == nil {
		return cluster.Placement{}, fmt.Errorf("episode %s: %w", id, cluster.ErrNotFound)
	}
	ep, err := f.owner.Get(id)
	if err != nil {
		return cluster.Placement{}, fmt.Errorf("episode %s: %w", id, cluster.ErrNotFound)
	}
	if f.lost.Load() {
		return cluster.Placement{}, fmt.Errorf("node %s: %w", f.ownerNode, cluster.ErrNodeLost)
	}
	return f.placement(ep), nil
}

func (f *fakeFront) Bind(ctx context.Context, req cluster.BindRequest) (pool.Episode, error) {
	f.mu.Lock()
	f.binds = append(f.binds, req)
	f.mu.Unlock()
	return f.local.Start(ctx, req.Pool, time.Duration(req.TTLSeconds*float64(time.Second)))
}

// agent is one served front door.
type agent struct {
	srv   *httptest.Server
	farm  *vmmtest.Farm
	pools *pool.Manager
	disp  *paintedDisplay
	front *fakeFront
}

// newAgent serves a farm whose VMs are named prefix1, prefix2... with one
// warm VM of pool "p" showing colour c; opts adds to its options.
func newAgent(t *testing.T, prefix string, c color.RGBA, opts Options) *agent {
	t.Helper()
	a := &agent{farm: vmmtest.New(), disp: &paintedDisplay{c: c}}
	a.farm.IDFormat = prefix + "%d"
	a.farm.ExecFn = func(vmm.ExecRequest) (vmm.ExecResult, error) {
		return vmm.ExecResult{Stdout: []byte("ran on " + prefix)}, nil
	}
	cfg := pool.Config{Pools: []pool.PoolConfig{{Name: "p", Image: "tiny", MemoryMiB: 256, VCPUs: 1, MinWarm: 1, Max: 1}}}
	cfg.SetDefaults()
	log := slog.New(slog.DiscardHandler)
	var err error
	a.pools, err = pool.New(context.Background(), a.farm, cfg, pool.Options{StateDir: t.TempDir(), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	desks := desk.New(a.farm, desk.Options{Log: log, Dial: func(context.Context, vmm.VM, *slog.Logger) (desk.Display, error) {
		return a.disp, nil
	}})
	a.front = &fakeFront{node: prefix, local: a.pools}
	opts.Desks, opts.Pools, opts.Logger = desks, a.pools, log
	opts.Token, opts.ViewerToken, opts.ClusterToken = clusterCtl, clusterViewer, clusterTok
	if opts.Cluster == nil {
		opts.Cluster = a.front
	}
	a.srv = httptest.NewServer(NewServer(a.farm, opts))
	t.Cleanup(func() { a.srv.Close(); desks.Close(); a.pools.Close(); a.farm.Close() })
	return a
}

var (
	red   = color.RGBA{200, 0, 0, 255}
	green = color.RGBA{0, 200, 0, 255}
)

// clusterPair serves A, the owner (loopback trusted, as on a host), and
// B, whose Front places A's episodes on A (no network trusted).
func clusterPair(t *testing.T) (a, b *agent) {
	t.Helper()
	a = newAgent(t, "a", red, Options{})
	b = newAgent(t, "b", green, Options{TrustedNets: []netip.Prefix{}})
	b.front.owner, b.front.ownerNode, b.front.ownerURL = a.pools, "node-a", a.srv.URL
	a.front.node = "node-a"
	return a, b
}

// call is rawCall with a body sent as JSON.
func call(t *testing.T, method, url, body string, header ...string) (*http.Response, []byte) {
	t.Helper()
	if body != "" {
		header = append([]string{"Content-Type", "application/json"}, header...)
	}
	return rawCall(t, method, url, body, header...)
}

func bearer(tok string) []string { return []string{"Authorization", "Bearer " + tok} }

// errCode is an error answer's code, "" if it is none.
func errCode(b []byte) string {
	var e api.ErrorResponse
	json.Unmarshal(b, &e)
	return e.Error.Code
}

// startThroughB starts an episode through B, which its Front places on A.
func startThroughB(t *testing.T, a, b *agent) api.Episode {
	t.Helper()
	resp, body := call(t, "POST", b.srv.URL+"/v1/episodes", `{"pool":"p"}`, bearer(clusterCtl)...)
	var ep api.Episode
	if json.Unmarshal(body, &ep); resp.StatusCode != http.StatusCreated {
		t.Fatalf("start through B: %d %s", resp.StatusCode, body)
	}
	if ep.Node != "node-a" || ep.URL != a.srv.URL || !strings.HasPrefix(ep.VM, "a") {
		t.Fatalf("start through B: node %q url %q vm %q; want node-a, %s and one of A's VMs", ep.Node, ep.URL, ep.VM, a.srv.URL)
	}
	// The viewer link is the episode's page on the agent asked.
	if ep.ViewerURL != b.srv.URL+"/episodes/"+ep.ID {
		t.Errorf("viewer_url %q, want B's %s/episodes/%s", ep.ViewerURL, b.srv.URL, ep.ID)
	}
	return ep
}

// An episode claimed through B lives on A; its actions, screenshot, exec,
// files and end all work through B and reach A's VM, never B's.
func TestClusterProxyReachesOwner(t *testing.T) {
	a, b := clusterPair(t)
	ep := startThroughB(t, a, b)
	base := b.srv.URL + "/v1/episodes/" + ep.ID

	resp, body := call(t, "POST", base+"/actions", `{"action":{"kind":"click","x":5,"y":5},"screenshot":"never"}`, bearer(clusterCtl)...)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("click through B: %d %s", resp.StatusCode, body)
	}
	if a.disp.presses.Load() == 0 || b.disp.presses.Load() != 0 {
		t.Errorf("click through B: A's screen got %d presses, B's %d; want A's only", a.disp.presses.Load(), b.disp.presses.Load())
	}

	resp, body = call(t, "GET", base+"/screenshot", "", bearer(clusterCtl)...)
	img, err := png.Decode(bytes.NewReader(body))
	if resp.StatusCode != http.StatusOK || err != nil {
		t.Fatalf("screenshot through B: %d %v %.200s", resp.StatusCode, err, body)
	}
	if got := color.RGBAModel.Convert(img.At(10, 10)).(color.RGBA); got != red {
		t.Errorf("screenshot through B shows %v, want A's red %v", got, red)
	}

	resp, body = call(t, "POST", base+"/exec", `{"argv":["id"]}`, bearer(clusterCtl)...)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "ran on a") {
		t.Errorf("exec through B: %d %s; want A's VM's answer", resp.StatusCode, body)
	}
	req, _ := http.NewRequest("PUT", base+"/files?path=/tmp/note", strings.NewReader("hello A"))
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Authorization", "Bearer "+clusterCtl)
	if put, err := http.DefaultClient.Do(req); err != nil || put.StatusCode != http.StatusNoContent {
		t.Fatalf("write a file through B: %v %v", err, put)
	}
	if got, ok := a.farm.File(ep.VM, "/tmp/note"); !ok || string(got) != "hello A" {
		t.Errorf("the file written through B is %q on A's VM (%v)", got, ok)
	}
	if resp, body = call(t, "GET", base+"/files?path=/tmp/note", "", bearer(clusterCtl)...); string(body) != "hello A" {
		t.Errorf("read the file through B: %d %q", resp.StatusCode, body)
	}

	// Cua's protocol on the episode.
	if resp, body = call(t, "GET", base+"/cua/status", "", bearer(clusterCtl)...); resp.StatusCode != http.StatusOK {
		t.Errorf("cua status through B: %d %s", resp.StatusCode, body)
	}

	// OSWorld's revert: the episode's VM reset in place, through B.
	a.farm.Lock()
	resetsA := a.farm.Resets
	a.farm.Unlock()
	if resp, body = call(t, "POST", base+"/reset", "", bearer(clusterCtl)...); resp.StatusCode != http.StatusOK {
		t.Errorf("reset through B: %d %s", resp.StatusCode, body)
	}
	a.farm.Lock()
	if a.farm.Resets != resetsA+1 {
		t.Errorf("reset through B: A's farm reset %d times, want 1", a.farm.Resets-resetsA)
	}
	a.farm.Unlock()

	resp, body = call(t, "DELETE", base, "", bearer(clusterCtl)...)
	var ended api.Episode
	if json.Unmarshal(body, &ended); resp.StatusCode != http.StatusOK || ended.State != api.EpisodeEnded {
		t.Fatalf("end through B: %d %s", resp.StatusCode, body)
	}
	if got, err := a.pools.Get(ep.ID); err != nil || got.State != pool.EpisodeEnded {
		t.Errorf("after the end through B, A holds %+v (%v)", got, err)
	}
}

// A proxied request keeps its caller's rights: a viewer token through B
// watches and cannot act, whether B or A is asked; the cluster token opens
// nothing by itself.
func TestClusterProxyKeepsViewerRights(t *testing.T) {
	a, b := clusterPair(t)
	ep := startThroughB(t, a, b)
	base := b.srv.URL + "/v1/episodes/" + ep.ID

	if resp, body := call(t, "GET", base+"/screenshot", "", bearer(clusterViewer)...); resp.StatusCode != http.StatusOK {
		t.Errorf("viewer's screenshot through B: %d %.200s", resp.StatusCode, body)
	}
	// A browser's ?token= is B's to check; it reaches A as the caller's token.
	if resp, body := call(t, "GET", base+"?token="+clusterViewer, ""); resp.StatusCode != http.StatusOK {
		t.Errorf("viewer's ?token= through B: %d %.200s", resp.StatusCode, body)
	}
	click := `{"action":{"kind":"click","x":5,"y":5},"screenshot":"never"}`
	resp, body := call(t, "POST", base+"/actions", click, bearer(clusterViewer)...)
	if resp.StatusCode != http.StatusForbidden || errCode(body) != api.CodeViewerToken {
		t.Errorf("viewer's click through B: %d %s; want 403 %s", resp.StatusCode, body, api.CodeViewerToken)
	}
	// The owner judges the caller's token itself, as a proxied request
	// shows it (cluster token plus the caller's token).
	onA := a.srv.URL + "/v1/episodes/" + ep.ID + "/actions"
	resp, body = call(t, "POST", onA, click, append(bearer(clusterViewer), ClusterTokenHeader, clusterTok)...)
	if resp.StatusCode != http.StatusForbidden || errCode(body) != api.CodeViewerToken {
		t.Errorf("viewer's proxied click on A: %d %s; want 403 %s", resp.StatusCode, body, api.CodeViewerToken)
	}
	// A trusts loopback, where B is; a proxied request is not trusted for
	// that: its caller is not at B's address.
	resp, body = call(t, "POST", onA, click, ClusterTokenHeader, clusterTok)
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("proxied click on A without a caller's token: %d %s; want 401", resp.StatusCode, body)
	}
	if n := a.disp.presses.Load(); n != 0 {
		t.Errorf("A's screen got %d presses from viewers", n)
	}
}

// The frame websocket of an episode works through B: B relays the
// upgrade and A's frames arrive.
func TestClusterProxyStreamsFrames(t *testing.T) {
	a, b := clusterPair(t)
	ep := startThroughB(t, a, b)
	url := "ws" + strings.TrimPrefix(b.srv.URL, "http") + "/v1/episodes/" + ep.ID + "/stream"
	hdr := http.Header{"Authorization": {"Bearer " + clusterViewer}, "Origin": {b.srv.URL}}
	c, resp, err := websocket.DefaultDialer.Dial(url, hdr)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("stream through B: %v (HTTP %d)", err, status)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	kind, frame, err := c.ReadMessage()
	if err != nil || kind != websocket.BinaryMessage || len(frame) == 0 {
		t.Fatalf("first message through B: kind %d, %d bytes, %v; want a binary frame", kind, len(frame), err)
	}
	// A page of another origin cannot open it through B.
	bad := hdr.Clone()
	bad.Set("Origin", "https://evil.example")
	if _, resp, err := websocket.DefaultDialer.Dial(url, bad); err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-site stream through B: %v %v; want 403", err, resp)
	}
	// The episode's end ends its stream (and does not wait for it).
	if resp, body := call(t, "DELETE", b.srv.URL+"/v1/episodes/"+ep.ID, "", bearer(clusterCtl)...); resp.StatusCode != http.StatusOK {
		t.Fatalf("end the episode: %d %s", resp.StatusCode, body)
	}
	for {
		if _, _, err = c.ReadMessage(); err != nil {
			break
		}
	}
	if !websocket.IsCloseError(err, websocket.CloseGoingAway) || !strings.Contains(err.Error(), "episode ended") {
		t.Errorf("stream after the episode's end: %v; want a close saying the episode ended", err)
	}
}

// POST /v1/cluster/bind is for agents: only the cluster token opens it,
// never a client's token, a viewer's or a trusted network; a single host
// has no such route.
func TestClusterBindNeedsClusterToken(t *testing.T) {
	a := newAgent(t, "a", red, Options{})
	bind := a.srv.URL + "/v1/cluster/bind"
	req := `{"desktop":"node-a.a1","episode":"ep-0123456789ab","pool":"p","vm":"a1","ttl_s":60}`
	for _, c := range []struct {
		what   string
		header []string
	}{
		{"no token, from a trusted network", nil},
		{"a viewer token", bearer(clusterViewer)},
		{"the control token", bearer(clusterCtl)},
		{"a wrong cluster token", []string{ClusterTokenHeader, "guess"}},
	} {
		resp, body := call(t, "POST", bind, req, c.header...)
		if resp.StatusCode != http.StatusUnauthorized || errCode(body) != api.CodeUnauthorized {
			t.Errorf("bind with %s: %d %s; want 401", c.what, resp.StatusCode, body)
		}
	}
	if len(a.front.binds) != 0 {
		t.Fatalf("refused binds reached the agent: %+v", a.front.binds)
	}
	resp, body := call(t, "POST", bind, req, ClusterTokenHeader, clusterTok)
	var ep api.Episode
	if json.Unmarshal(body, &ep); resp.StatusCode != http.StatusOK || ep.ID == "" || ep.Node != "a" || ep.ExpiresAt.IsZero() {
		t.Fatalf("bind with the cluster token: %d %s", resp.StatusCode, body)
	}
	if len(a.front.binds) != 1 || a.front.binds[0].Episode != "ep-0123456789ab" {
		t.Errorf("binds: %+v", a.front.binds)
	}

	single := newSecFarm(t, Options{ClusterToken: clusterTok})
	if resp, body := single.send(t, "POST", "/v1/cluster/bind", req, "Content-Type", "application/json",
		ClusterTokenHeader, clusterTok); resp.StatusCode != http.StatusNotFound {
		t.Errorf("bind on a single host: %d %s; want 404", resp.StatusCode, body)
	}
}

// The owner lets a proxied request's Host and Origin pass only with the
// cluster token: without it, a foreign Host is still a rebinding page.
func TestClusterOwnerHostNeedsClusterToken(t *testing.T) {
	a, b := clusterPair(t)
	ep := startThroughB(t, a, b)
	path := a.srv.URL + "/v1/episodes/" + ep.ID
	resp, body := call(t, "GET", path, "", append(bearer(clusterCtl), "Host", "agent-b.example:8080")...)
	if resp.StatusCode != http.StatusMisdirectedRequest || errCode(body) != api.CodeMisdirectedRequest {
		t.Errorf("foreign Host without the cluster token: %d %s; want 421", resp.StatusCode, body)
	}
	resp, body = call(t, "GET", path, "", append(bearer(clusterCtl), "Host", "agent-b.example:8080", ClusterTokenHeader, "guess")...)
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("foreign Host with a wrong cluster token: %d %s; want 421", resp.StatusCode, body)
	}
	resp, body = call(t, "GET", path, "", append(bearer(clusterCtl), "Host", "agent-b.example:8080", ClusterTokenHeader, clusterTok)...)
	if resp.StatusCode != http.StatusOK {
		t.Errorf("foreign Host with the cluster token: %d %s; want 200", resp.StatusCode, body)
	}
	click := `{"action":{"kind":"click","x":5,"y":5},"screenshot":"never"}`
	resp, body = call(t, "POST", path+"/actions", click, append(bearer(clusterCtl), "Origin", "http://agent-b.example:8080")...)
	if resp.StatusCode != http.StatusForbidden || errCode(body) != api.CodeCrossSite {
		t.Errorf("foreign Origin without the cluster token: %d %s; want 403 %s", resp.StatusCode, body, api.CodeCrossSite)
	}
}

// A lost node's episode answers node_lost through any agent; an owner
// that does not answer is a 502 naming its node; a claim while the
// apiserver is away is 503 cluster_unavailable; an episode no agent holds
// is episode_not_found.
func TestClusterFailureCodes(t *testing.T) {
	a, b := clusterPair(t)
	ep := startThroughB(t, a, b)
	base := b.srv.URL + "/v1/episodes/" + ep.ID

	b.front.lost.Store(true)
	resp, body := call(t, "GET", base+"/screenshot", "", bearer(clusterCtl)...)
	if resp.StatusCode != http.StatusGone || errCode(body) != api.CodeNodeLost {
		t.Errorf("screenshot of a lost node's episode: %d %s; want 410 %s", resp.StatusCode, body, api.CodeNodeLost)
	}
	b.front.lost.Store(false)

	// An owner URL where nothing listens.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b.front.ownerURL = "http://" + ln.Addr().String()
	ln.Close()
	resp, body = call(t, "GET", base+"/screenshot", "", bearer(clusterCtl)...)
	if resp.StatusCode != http.StatusBadGateway || errCode(body) != api.CodeNodeUnreachable || !strings.Contains(string(body), "node-a") {
		t.Errorf("screenshot with the owner down: %d %s; want 502 %s naming node-a", resp.StatusCode, body, api.CodeNodeUnreachable)
	}

	resp, body = call(t, "GET", b.srv.URL+"/v1/episodes/ep-000000000000", "", bearer(clusterCtl)...)
	if resp.StatusCode != http.StatusNotFound || errCode(body) != api.CodeEpisodeNotFound {
		t.Errorf("an episode nobody holds: %d %s; want 404 %s", resp.StatusCode, body, api.CodeEpisodeNotFound)
	}

	for _, c := range []struct {
		err    error
		status int
		code   string
	}{
		{cluster.ErrUnavailable, http.StatusServiceUnavailable, api.CodeClusterUnavailable},
		{cluster.ErrNoDesktop, api.Status(api.CodePoolFull), api.CodePoolFull},
		{fmt.Errorf("bind: %w", pool.ErrNotWarm), http.StatusConflict, api.CodeNotWarm},
	} {
		b.front.claimErr = c.err
		resp, body := call(t, "POST", b.srv.URL+"/v1/episodes", `{"pool":"p"}`, bearer(clusterCtl)...)
		if resp.StatusCode != c.status || errCode(body) != c.code {
			t.Errorf("claim failing with %v: %d %s; want %d %s", c.err, resp.StatusCode, body, c.status, c.code)
		}
	}
}

// The episode's viewer page works through B as a browser uses it: opened
// once with ?token=, then B's cookie carries the page's own requests (the
// activity feed, the takeover socket), which B relays to A with the
// caller's token: a viewer may watch, not take control.
func TestClusterViewerPageThroughB(t *testing.T) {
	a, b := clusterPair(t)
	ep := startThroughB(t, a, b)
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar}
	resp, err := browser.Get(ep.ViewerURL + "?token=" + clusterViewer)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(page), `data-api="/v1/episodes/`+ep.ID+`"`) ||
		!strings.Contains(string(page), `data-vm="`+ep.VM+`"`) {
		t.Fatalf("viewer page through B: %d %.400s", resp.StatusCode, page)
	}

	// The activity feed, with the cookie only.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", b.srv.URL+"/v1/episodes/"+ep.ID+"/activity", nil)
	resp, err = browser.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Errorf("activity feed through B: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	resp.Body.Close()

	// The takeover socket, read-only: the RFB greeting arrives from A.
	u, _ := url.Parse(b.srv.URL)
	hdr := http.Header{"Origin": {b.srv.URL}}
	for _, c := range jar.Cookies(u) {
		hdr.Add("Cookie", c.Name+"="+c.Value)
	}
	c, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(b.srv.URL, "http")+"/v1/episodes/"+ep.ID+"/vnc", hdr)
	if err != nil {
		t.Fatalf("takeover socket through B: %v", err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, greeting, err := c.ReadMessage()
	c.Close()
	if err != nil || !strings.HasPrefix(string(greeting), "RFB 003.008") {
		t.Errorf("takeover socket through B: %q %v; want the RFB greeting", greeting, err)
	}

	// Taking control is a control row: the viewer's cookie cannot.
	req, _ = http.NewRequest("POST", b.srv.URL+"/v1/episodes/"+ep.ID+"/control", nil)
	resp, err = browser.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || errCode(body) != api.CodeViewerToken {
		t.Errorf("viewer takes control through B: %d %s", resp.StatusCode, body)
	}
	// With the control token it can, on A's VM.
	resp2, body := call(t, "POST", b.srv.URL+"/v1/episodes/"+ep.ID+"/control", "", bearer(clusterCtl)...)
	if resp2.StatusCode != http.StatusCreated {
		t.Errorf("take control through B: %d %s", resp2.StatusCode, body)
	}
	resp2, body = call(t, "GET", a.srv.URL+"/v1/vms/"+ep.VM+"/control", "", bearer(clusterCtl)...)
	if !strings.Contains(string(body), `"human":true`) {
		t.Errorf("A's VM after control was taken through B: %d %s", resp2.StatusCode, body)
	}
}

// MCP at B drives an episode on A: /mcp's in-process calls go through the
// same proxy, with /mcp's caller's rights (the control token).
func TestClusterMCPThroughB(t *testing.T) {
	a, b := clusterPair(t)
	ctx := context.Background()
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+clusterCtl)
		return http.DefaultTransport.RoundTrip(r)
	})}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: b.srv.URL + "/mcp", HTTPClient: hc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tool := func(name string, args map[string]any) *mcp.CallToolResult {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil || res.IsError {
			t.Fatalf("%s: %v %+v", name, err, res)
		}
		return res
	}
	tool("start_episode", map[string]any{"pool": "p"})
	eps := a.pools.List()
	if len(eps) != 1 || len(b.pools.List()) != 0 {
		t.Fatalf("after start_episode at B: A holds %d episodes, B %d; want A one", len(eps), len(b.pools.List()))
	}
	tool("write_file", map[string]any{"path": "/tmp/f", "content": "via mcp at B"})
	if got, _ := a.farm.File(eps[0].VM, "/tmp/f"); string(got) != "via mcp at B" {
		t.Errorf("A's VM holds %q", got)
	}
	tool("computer", map[string]any{"action": "left_click", "coordinate": []int{3, 4}})
	if a.disp.presses.Load() == 0 || b.disp.presses.Load() != 0 {
		t.Errorf("MCP click at B: A's screen got %d presses, B's %d", a.disp.presses.Load(), b.disp.presses.Load())
	}
	tool("end_episode", nil)
	if got, _ := a.pools.Get(eps[0].ID); got.State != pool.EpisodeEnded {
		t.Errorf("after end_episode at B, A's episode is %s", got.State)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A call in flight through B when A's node is lost ends with node_lost,
// not a wait for an owner that will not answer.
func TestClusterLostOwnerEndsCallInFlight(t *testing.T) {
	a, b := clusterPair(t)
	ep := startThroughB(t, a, b)
	started, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	a.farm.Lock()
	a.farm.ExecFn = func(vmm.ExecRequest) (vmm.ExecResult, error) {
		close(started)
		<-release // an owner that hangs
		return vmm.ExecResult{}, nil
	}
	a.farm.Unlock()
	go func() {
		<-started
		b.front.lost.Store(true)
	}()
	resp, body := call(t, "POST", b.srv.URL+"/v1/episodes/"+ep.ID+"/exec", `{"argv":["sleep","1000"]}`, bearer(clusterCtl)...)
	if resp.StatusCode != http.StatusGone || errCode(body) != api.CodeNodeLost {
		t.Errorf("exec in flight when the owner's node was lost: %d %s; want 410 %s", resp.StatusCode, body, api.CodeNodeLost)
	}
}

// Every row of an episode {id} is owned: on a cluster agent, none of them
// can be served for an episode that lives on another node.
func TestClusterEpisodeRowsAreOwned(t *testing.T) {
	s := newServer(vmmtest.New(), Options{Cluster: &fakeFront{}, ClusterToken: clusterTok})
	n := 0
	for _, rt := range s.expand(s.routes()) {
		if strings.HasPrefix(rt.path, "/v1/episodes/{id}") || strings.HasPrefix(rt.path, "/episodes/{id}") {
			n++
			if !rt.owned {
				t.Errorf("%s %s acts on an episode but is not owned", rt.method, rt.path)
			}
		} else if rt.owned {
			t.Errorf("%s %s is owned but names no episode", rt.method, rt.path)
		}
		if rt.path == "/v1/cluster/bind" && rt.access != accessCluster {
			t.Errorf("the bind route's access is %s", rt.access)
		}
	}
	if n < 15 {
		t.Errorf("%d episode rows; the table has more", n)
	}
}

// A cluster agent's /healthz tells its view of the apiserver and stays
// 200 while the apiserver is unreachable: the node's episodes go on.
func TestClusterHealth(t *testing.T) {
	renewed := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		h    cluster.Health
		want api.ClusterHealth
	}{
		{"before the first renewal", cluster.Health{Node: "n1", LeaseDuration: 15 * time.Second},
			api.ClusterHealth{Node: "n1", APIServer: api.APIServerUnknown, LeaseSeconds: 15}},
		{"renewing", cluster.Health{Node: "n1", Reachable: true, Since: renewed.Add(-time.Hour), LastRenewal: renewed, LeaseDuration: 15 * time.Second},
			api.ClusterHealth{Node: "n1", APIServer: api.APIServerOK, Since: "2026-12-04T09:00:00Z", LeaseRenewed: "2026-12-04T10:00:00Z", LeaseSeconds: 15}},
		{"failing", cluster.Health{Node: "n1", Since: renewed.Add(2 * time.Second), LastRenewal: renewed, LeaseDuration: 15 * time.Second,
			Err: fmt.Errorf("renew lease deskfarm-node-n1: connection refused")},
			api.ClusterHealth{Node: "n1", APIServer: api.APIServerUnreachable, Since: "2026-12-04T10:00:02Z", LeaseRenewed: "2026-12-04T10:00:00Z", LeaseSeconds: 15,
				Error: "renew lease deskfarm-node-n1: connection refused"}},
	} {
		h := newHarness(t, Options{Cluster: &fakeFront{health: tc.h}, ClusterToken: clusterTok})
		w := h.do("GET", "/healthz", nil)
		var got api.HealthResponse
		if err := json.Unmarshal(w.Body.Bytes(), &got); w.Code != http.StatusOK || err != nil || got.Status != "ok" || got.Cluster == nil {
			t.Errorf("%s: %d %s (%v); want 200, status ok, a cluster part", tc.name, w.Code, w.Body, err)
			continue
		}
		if *got.Cluster != tc.want {
			t.Errorf("%s: cluster %+v, want %+v", tc.name, *got.Cluster, tc.want)
		}
	}
	// A single host's answer has no cluster part.
	w := newHarness(t, Options{}).do("GET", "/healthz", nil)
	if strings.Contains(w.Body.String(), "cluster") {
		t.Errorf("a single host's healthz: %s", w.Body)
	}
}
