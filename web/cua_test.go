package web

import (
	"encoding/json"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/deskfarm/deskfarm/guestx"
	"github.com/deskfarm/deskfarm/vmm"
)

// Cua's computer-server protocol is mounted per VM under /v1/vms/{id}/cua/,
// the base URL Cua's Computer is given, behind the API's authentication.
func TestCuaMount(t *testing.T) {
	srv, farm := deskServer(t, Options{Token: "s3cret", TrustedNets: []netip.Prefix{}})
	farm.ExecFn = func(req vmm.ExecRequest) (vmm.ExecResult, error) {
		return vmm.ExecResult{Stdout: []byte("hi\n")}, nil
	}
	base := srv.URL + "/v1/vms/vm1/cua"
	post := func(url, body string, auth bool) (int, string) {
		req, _ := http.NewRequest("POST", url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json") // as Cua's client (aiohttp json=) sends
		if auth {
			req.Header.Set("Authorization", "Bearer s3cret")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if status, _ := post(base+"/cmd", `{"command":"version"}`, false); status != http.StatusUnauthorized {
		t.Fatalf("without the token: %d", status)
	}
	status, body := post(base+"/cmd", `{"command":"get_screen_size","params":{}}`, true)
	if status != 200 || body != `data: {"success":true,"size":{"width":640,"height":400}}`+"\n\n" {
		t.Fatalf("get_screen_size: %d %q", status, body)
	}
	status, body = post(base+"/cmd", `{"command":"run_command","params":{"command":"echo hi"}}`, true)
	if status != 200 || body != `data: {"success":true,"stdout":"hi\n","stderr":"","return_code":0}`+"\n\n" {
		t.Fatalf("run_command: %d %q", status, body)
	}
	if c, ok := guestx.Unwrap(farm.LastExec); !ok || !slices.Contains(c.Argv, "echo hi") {
		t.Fatalf("run_command ran %q, not as the desktop user", farm.LastExec.Argv)
	}
	if status, _ := post(srv.URL+"/v1/vms/nope/cua/cmd", `{"command":"version"}`, true); status != http.StatusNotFound {
		t.Fatalf("unknown vm: %d", status)
	}

	// The websocket, as Cua's client opens it from the same base URL.
	c, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(base, "http")+"/ws",
		http.Header{"Authorization": {"Bearer s3cret"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.WriteMessage(websocket.TextMessage, []byte(`{"command":"version","params":{}}`))
	_, msg, err := c.ReadMessage()
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if json.Unmarshal(msg, &v); v["success"] != true || v["protocol"] != 1.0 {
		t.Fatalf("version over the websocket: %s", msg)
	}

	// GET /status, the probe of cua-sandbox and Cua's cloud provider.
	req, _ := http.NewRequest("GET", base+"/status", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"os_type":"linux"`) {
		t.Fatalf("status: %d %s", resp.StatusCode, b)
	}
}

// On an episode, Cua's coordinates stay the screen's own pixels whatever
// the pool's screenshot size, and an open websocket ends with the episode
// (it holds the lease while open).
func TestCuaEpisode(t *testing.T) {
	srv, ep := startEpisodeOnStill(t)
	base := srv.URL + "/v1/episodes/" + ep.ID + "/cua"
	code, b := send(t, "POST", base+"/cmd", `{"command":"get_screen_size"}`)
	if code != 200 || string(b) != `data: {"success":true,"size":{"width":640,"height":400}}`+"\n\n" {
		t.Fatalf("get_screen_size on the episode: %d %q", code, b)
	}
	c, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(base, "http")+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.WriteMessage(websocket.TextMessage, []byte(`{"command":"version"}`))
	if _, msg, err := c.ReadMessage(); err != nil || !strings.Contains(string(msg), `"protocol":1`) {
		t.Fatalf("version: %s %v", msg, err)
	}
	if code, b := send(t, "DELETE", srv.URL+"/v1/episodes/"+ep.ID, ""); code != http.StatusOK {
		t.Fatalf("end episode: %d %s", code, b)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, msg, err := c.ReadMessage(); err == nil {
		t.Fatalf("the websocket outlived its episode: %s", msg)
	} else if ne, ok := err.(interface{ Timeout() bool }); ok && ne.Timeout() {
		t.Fatal("the websocket stayed open after the episode ended")
	}
}
