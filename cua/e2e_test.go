package cua_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/internal/testenv"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/web"
)

// cuaClient speaks to one VM's Cua endpoint as Cua's Python client does
// (computer/interface/generic.py @ b296ec9): POST BASE/cmd, then strip the
// body, require "data: ", json.loads the rest.
type cuaClient struct {
	t    *testing.T
	base string
}

func (c cuaClient) cmd(command string, params map[string]any) map[string]any {
	c.t.Helper()
	if params == nil {
		params = map[string]any{}
	}
	body, _ := json.Marshal(map[string]any{"command": command, "params": params})
	resp, err := http.Post(c.base+"/cmd", "application/json", bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	s := strings.TrimSpace(string(b))
	if resp.StatusCode != 200 || !strings.HasPrefix(s, "data: ") {
		c.t.Fatalf("%s: HTTP %d %q: Cua's client would call it malformed", command, resp.StatusCode, b)
	}
	var out map[string]any
	if err := json.Unmarshal([]byte(s[6:]), &out); err != nil {
		c.t.Fatalf("%s: %v in %q", command, err, s)
	}
	return out
}

// ok is cmd for a command that must succeed.
func (c cuaClient) ok(command string, params map[string]any) map[string]any {
	c.t.Helper()
	out := c.cmd(command, params)
	if out["success"] != true {
		c.t.Fatalf("%s %v: %v", command, params, out)
	}
	return out
}

// shell is the client's run_command: (stdout, stderr, returncode).
func (c cuaClient) shell(command string) (string, string, int) {
	c.t.Helper()
	out := c.ok("run_command", map[string]any{"command": command})
	return out["stdout"].(string), out["stderr"].(string), int(out["return_code"].(float64))
}

// readText is the client's read_text: get_file_size, then read_bytes.
func (c cuaClient) readText(path string) (string, bool) {
	c.t.Helper()
	size := c.cmd("get_file_size", map[string]any{"path": path})
	if size["success"] != true {
		return "", false
	}
	out := c.ok("read_bytes", map[string]any{"path": path, "offset": 0, "length": nil})
	b, err := base64.StdEncoding.DecodeString(out["content_b64"].(string))
	if err != nil || float64(len(b)) != size["size"].(float64) {
		c.t.Fatalf("read_bytes of %s: %d bytes (%v), size said %v", path, len(b), err, size["size"])
	}
	return string(b), true
}

// activeWindow asks the guest for the focused window's id.
func (c cuaClient) activeWindow() string {
	c.t.Helper()
	out, _, _ := c.shell("xdotool getactivewindow 2>/dev/null")
	return strings.TrimSpace(out)
}

// startCua creates a VM of image on a real farm served by deskfarm's API, and
// returns a Cua client of its endpoint, the VM, its desk pool and the API's
// base URL.
func startCua(t *testing.T, image string, memMiB int) (cuaClient, vmm.VM, *desk.Pool, string) {
	m := testenv.Manager(t, image)
	pool := desk.NewPool(m, nil)
	srv := httptest.NewServer(web.NewServer(m, web.Options{Desks: pool}))
	t.Cleanup(func() { srv.Close(); pool.Close() })
	vm, err := m.Create(context.Background(), vmm.CreateOptions{Image: image, MemoryMiB: memMiB, VCPUs: 2})
	if err != nil {
		t.Fatal(err)
	}
	return cuaClient{t: t, base: srv.URL + "/v1/vms/" + vm.ID + "/cua"}, vm, pool, srv.URL
}

// openTerminal opens a terminal by hotkey, as a person would, and returns
// its window id once it has the focus.
func (c cuaClient) openTerminal() string {
	c.t.Helper()
	c.ok("hotkey", map[string]any{"keys": []string{"ctrl", "alt", "t"}})
	deadline := time.Now().Add(90 * time.Second)
	for {
		out, _, _ := c.shell(`a=$(xdotool getactivewindow) && xdotool search --onlyvisible --class lxterminal | grep -qx "$a" && echo "$a"`)
		if term := strings.TrimSpace(out); term != "" {
			return term
		}
		if time.Now().After(deadline) {
			c.t.Fatal("no focused terminal after ctrl+alt+t")
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// On the desktop image, Cua's commands drive the VM through deskfarm's API:
// a terminal opened with a hotkey, a click that moves the focus, a command
// typed into the terminal, run_command as the desktop user, files written and
// read back, and the websocket.
func TestE2ECuaDesktop(t *testing.T) {
	c, vm, _, _ := startCua(t, "desktop", 1024)

	// Computer.wait_for_ready: version, then get_screen_size.
	c.ok("version", nil)
	size := c.ok("get_screen_size", nil)["size"].(map[string]any)
	w, h := int(size["width"].(float64)), int(size["height"].(float64))
	if w != vm.Width || h != vm.Height {
		t.Fatalf("get_screen_size %dx%d, vm is %dx%d", w, h, vm.Width, vm.Height)
	}
	shot := c.ok("screenshot", nil)
	img, err := base64.StdEncoding.DecodeString(shot["image_data"].(string))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(img))
	if err != nil || cfg.Width != w || cfg.Height != h {
		t.Fatalf("screenshot: %dx%d png (%v), screen %dx%d", cfg.Width, cfg.Height, err, w, h)
	}

	// run_command runs as the desktop user, in its X session.
	stdout, stderr, code := c.shell(`id -un; echo "$DISPLAY"; xdotool getdisplaygeometry`)
	if want := fmt.Sprintf("user\n:0\n%d %d\n", w, h); stdout != want || code != 0 {
		t.Fatalf("run_command: %q %q %d, want %q", stdout, stderr, code, want)
	}

	term := c.openTerminal()
	geo, _, _ := c.shell("xdotool getwindowgeometry --shell " + term)
	var x, y, ww, wh int
	for _, kv := range strings.Fields(geo) {
		k, v, _ := strings.Cut(kv, "=")
		n, _ := strconv.Atoi(v)
		switch k {
		case "X":
			x = n
		case "Y":
			y = n
		case "WIDTH":
			ww = n
		case "HEIGHT":
			wh = n
		}
	}
	if ww == 0 || wh == 0 {
		t.Fatalf("terminal geometry: %q", geo)
	}

	// The window commands see the same window.
	if id := c.ok("get_current_window_id", nil)["window_id"]; fmt.Sprint(int64(id.(float64))) != term {
		t.Fatalf("get_current_window_id %v, xdotool says %s", id, term)
	}
	if sz := c.ok("get_window_size", map[string]any{"window_id": term}); int(sz["width"].(float64)) != ww || int(sz["height"].(float64)) != wh {
		t.Fatalf("get_window_size %v, geometry %dx%d", sz, ww, wh)
	}

	// left_click on the desktop beside the terminal takes the focus from
	// it; left_click in the terminal gives it back, with the pointer where
	// the click said.
	outside := [2]int{w - 40, 40}
	if x+ww/2 > w/2 {
		outside[0] = 40
	}
	if outside[0] >= x && outside[0] < x+ww && outside[1] >= y && outside[1] < y+wh {
		t.Skipf("the terminal (%dx%d at %d,%d) covers the screen: no desktop to click", ww, wh, x, y)
	}
	c.ok("left_click", map[string]any{"x": outside[0], "y": outside[1]})
	if a := c.activeWindow(); a == term {
		t.Fatalf("the terminal kept the focus after a click on the desktop at %v", outside)
	}
	cx, cy := x+ww/2, y+wh/2
	c.ok("left_click", map[string]any{"x": cx, "y": cy})
	deadline := time.Now().Add(10 * time.Second)
	for c.activeWindow() != term {
		if time.Now().After(deadline) {
			t.Fatalf("a click at %d,%d in the terminal did not focus it", cx, cy)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The guest's pointer may sit one pixel short: QEMU scales VNC pixels
	// to the tablet's 0-32767 by the screen width, not width-1
	// (ui/input.c qemu_input_scale_axis), and the guest scales back down
	// with truncation (seen: a click at 641,416 landed at 640,415).
	loc, _, _ := c.shell("xdotool getmouselocation --shell")
	var gx, gy int
	for _, kv := range strings.Fields(loc) {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "X":
			gx, _ = strconv.Atoi(v)
		case "Y":
			gy, _ = strconv.Atoi(v)
		}
	}
	if gx < cx-1 || gx > cx || gy < cy-1 || gy > cy {
		t.Fatalf("the guest's pointer after left_click at %d,%d: %q", cx, cy, loc)
	}
	pos := c.ok("get_cursor_position", nil)["position"].(map[string]any)
	if int(pos["x"].(float64)) != cx || int(pos["y"].(float64)) != cy {
		t.Fatalf("get_cursor_position %v after a click at %d,%d", pos, cx, cy)
	}

	// type_text into the terminal; the command's file comes back through
	// read_text.
	c.ok("type_text", map[string]any{"text": "echo cua > /tmp/cua.txt\n"})
	deadline = time.Now().Add(30 * time.Second)
	for {
		got := c.cmd("read_text", map[string]any{"path": "/tmp/cua.txt"})
		if got["success"] == true {
			if got["content"] != "cua\n" {
				t.Fatalf("typed command wrote %q", got["content"])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the typed command wrote no file: %v", got)
		}
		time.Sleep(300 * time.Millisecond)
	}

	// write_text then read_text, as cua-sandbox sends them, and as
	// Computer's read_text does (get_file_size + read_bytes). The file is
	// the desktop user's.
	const note = "Grüße from Cua ✓\n"
	c.ok("write_text", map[string]any{"path": "~/cua-note.txt", "content": note})
	if got := c.ok("read_text", map[string]any{"path": "/home/user/cua-note.txt"})["content"]; got != note {
		t.Fatalf("read_text: %q, want %q", got, note)
	}
	if got, ok := c.readText("cua-note.txt"); !ok || got != note {
		t.Fatalf("client read_text: %q %v", got, ok)
	}
	if owner, _, _ := c.shell("stat -c %U ~/cua-note.txt"); owner != "user\n" {
		t.Fatalf("written file owned by %q", owner)
	}
	if c.ok("file_exists", map[string]any{"path": "~/cua-note.txt"})["exists"] != true {
		t.Fatal("file_exists of the written file is false")
	}
	if _, ok := c.readText("/home/user/missing.txt"); ok {
		t.Fatal("a missing file read as success")
	}

	// The same over the websocket, in order.
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(c.base, "http")+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	for _, q := range []string{`{"command":"screenshot","params":{}}`, `{"command":"get_cursor_position","params":{}}`,
		`{"command":"read_text","params":{"path":"/tmp/cua.txt"}}`} {
		ws.WriteMessage(websocket.TextMessage, []byte(q))
	}
	var answers []map[string]any
	for range 3 {
		_, msg, err := ws.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		var a map[string]any
		json.Unmarshal(msg, &a)
		answers = append(answers, a)
	}
	if answers[0]["image_data"] == nil || answers[1]["position"] == nil || answers[2]["content"] != "cua\n" {
		t.Fatalf("websocket answers out of order or wrong: screenshot %v, cursor %v, read_text %v",
			answers[0]["format"], answers[1], answers[2])
	}
}

// The text, which Cua's type_text garbled ("Grße, caf ï nave ✓ 日"
// when it went through xdotool type in the guest).
const unicodeText = "Grüße, café — naïve ✓ 日本語"

// On the desktop image, Cua's type_text of non-ASCII text arrives in a
// terminal byte for byte, is recorded in the activity log like any agent's
// input, and the clipboard round-trips Unicode. While a person holds
// control, a Cua command is refused with the code the actions route gives.
// The calls are Cua's client's (computer/interface/generic.py @ b296ec9):
// type_text(text) sends {"command": "type_text", "params": {"text": text}},
// press(key) "press_key", hotkey(*keys) "hotkey" with "keys",
// set_clipboard(text) and copy_to_clipboard().
func TestE2ECuaUnicodeAndControl(t *testing.T) {
	c, vm, pool, api := startCua(t, "desktop", 1024)
	c.openTerminal()

	// cat copies what the terminal gets, byte for byte, into a file.
	c.ok("type_text", map[string]any{"text": "cat > /tmp/typed.txt\n"})
	c.ok("type_text", map[string]any{"text": unicodeText})
	c.ok("press_key", map[string]any{"key": "enter"})
	c.ok("hotkey", map[string]any{"keys": []string{"ctrl", "d"}})
	want := unicodeText + "\n"
	deadline := time.Now().Add(60 * time.Second)
	for {
		got, ok := c.readText("/tmp/typed.txt")
		if ok && got == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the terminal got %q (%v), want %q", got, ok, want)
		}
		time.Sleep(500 * time.Millisecond)
	}

	d, err := pool.Get(context.Background(), vm.ID)
	if err != nil {
		t.Fatal(err)
	}
	evs, _ := d.Activity(0)
	var logged bool
	for _, ev := range evs {
		logged = logged || (ev.Source == desk.SourceAgent && ev.Kind == "type" && ev.Text == unicodeText)
	}
	if !logged {
		t.Fatalf("no agent type event with the text in the activity log: %+v", evs)
	}

	c.ok("set_clipboard", map[string]any{"text": unicodeText})
	if got := c.ok("copy_to_clipboard", nil)["content"]; got != unicodeText {
		t.Fatalf("copy_to_clipboard: %q, want %q", got, unicodeText)
	}

	// The desktop image has no AT-SPI: the tree is unsupported, as before.
	if out := c.cmd("get_accessibility_tree", nil); out["success"] != false || out["code"] != "unsupported" {
		t.Fatalf("get_accessibility_tree on the desktop image: %v", out)
	}

	// A person takes control: Cua's input is refused as the actions
	// route's is, with the same code.
	if _, err := d.TakeControl(); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(api+"/v1/vms/"+vm.ID+"/actions", "application/json",
		strings.NewReader(`{"tool":"neutral","input":[{"kind":"type","text":"x"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var apiErr struct {
		Error struct{ Code string } `json:"error"`
	}
	json.NewDecoder(resp.Body).Decode(&apiErr)
	resp.Body.Close()
	if apiErr.Error.Code == "" {
		t.Fatalf("actions route under human control: HTTP %d without an error code", resp.StatusCode)
	}
	for _, cmd := range []struct {
		name   string
		params map[string]any
	}{
		{"type_text", map[string]any{"text": unicodeText}},
		{"left_click", map[string]any{"x": 10, "y": 10}},
		{"scroll", map[string]any{"x": 2, "y": 0}},
		{"set_clipboard", map[string]any{"text": "x"}},
	} {
		out := c.cmd(cmd.name, cmd.params)
		if out["success"] != false || out["code"] != apiErr.Error.Code {
			t.Errorf("%s under human control: %v, want success false and code %q as on the actions route",
				cmd.name, out, apiErr.Error.Code)
		}
	}
}

// On the osworld image, which has AT-SPI, Cua's get_accessibility_tree
// answers the desktop's tree (the walk OSWorld's /accessibility makes), in
// Cua's node shape, with the terminal Cua launched in it. Cua's client's
// get_accessibility_tree() sends the bare command and returns the answer,
// raising unless success (computer/interface/generic.py @ b296ec9).
func TestE2ECuaAccessibilityTree(t *testing.T) {
	c, _, _, _ := startCua(t, "osworld", 2048)
	c.ok("launch", map[string]any{"app": "gnome-terminal"})
	deadline := time.Now().Add(3 * time.Minute)
	for {
		out, _, _ := c.shell(`python3 -c "import pyatspi; print([a.name for a in pyatspi.Registry.getDesktop(0)])"`)
		if strings.Contains(out, "gnome-terminal-server") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gnome-terminal never joined the AT-SPI desktop: %q", out)
		}
		time.Sleep(2 * time.Second)
	}

	start := time.Now()
	out := c.cmd("get_accessibility_tree", nil)
	t.Logf("get_accessibility_tree answered in %s", time.Since(start).Round(time.Millisecond))
	if out["success"] != true {
		t.Fatalf("get_accessibility_tree: %v", out)
	}
	type node struct {
		Role     string
		Title    string
		Position *struct{ X, Y int }
		Size     *struct{ Width, Height int }
		Children []node
	}
	b, _ := json.Marshal(out["tree"])
	var root node
	if err := json.Unmarshal(b, &root); err != nil {
		t.Fatalf("tree: %v in %.300s", err, b)
	}
	var term *node
	var placed int
	var walk func(n *node)
	walk = func(n *node) {
		if n.Role == "application" && n.Title == "gnome-terminal-server" {
			term = n
		}
		if n.Position != nil && n.Size != nil && n.Size.Width > 0 {
			placed++
		}
		for i := range n.Children {
			walk(&n.Children[i])
		}
	}
	walk(&root)
	if root.Role != "desktop frame" || term == nil || placed == 0 {
		t.Fatalf("tree root %q, terminal %v, %d nodes on screen: %.500s", root.Role, term != nil, placed, b)
	}
}
