package atspi

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"
)

// The hello is found after what an earlier relay left on the port, and
// nothing past it is read.
func TestReadHello(t *testing.T) {
	r := bytes.NewReader([]byte("l\x00\x01stale D-Bus bytes\nDESKFARM-A11Y 0123 1000\nAUTH"))
	uid, err := readHello(r, "0123")
	if err != nil || uid != "1000" {
		t.Fatalf("uid %q, %v", uid, err)
	}
	if rest, _ := io.ReadAll(r); string(rest) != "AUTH" {
		t.Fatalf("read past the hello: %q left", rest)
	}
	for name, in := range map[string]string{
		"another walk's nonce":    "DESKFARM-A11Y 9999 1000\n",
		"a uid that is no number": "DESKFARM-A11Y 0123 root\n",
		"endless garbage":         strings.Repeat("x", 2<<20),
	} {
		if uid, err := readHello(strings.NewReader(in), "0123"); err == nil {
			t.Errorf("%s: uid %q, want an error", name, uid)
		}
	}
}

// Values are written as OSWorld's server writes them, with Python's str().
func TestPyFloat(t *testing.T) {
	for f, want := range map[float64]string{
		0: "0.0", 50: "50.0", -3: "-3.0", 0.5: "0.5", 0.1: "0.1", 1e-05: "1e-05", 0.0001: "0.0001",
		1500000: "1500000.0", 1e16: "1e+16", 123456789012345678: "1.2345678901234568e+17",
	} {
		if got := pyFloat(f); got != want {
			t.Errorf("pyFloat(%v) = %q, want %q", f, got, want)
		}
	}
}

// sample is a desktop with one application, whose frame holds a push
// button on screen and an off-screen label with text to escape.
func sample() *Node {
	button := &Node{Role: "push button", Name: "Save", States: []string{"visible", "showing", "focusable"}, Box: &[4]int32{30, 40, 80, 24},
		Attrs: []Attr{{"attr:toolkit", "gtk"}, {"cp:screencoord", "(30, 40)"}, {"cp:size", "(80, 24)"}, {"act:click_desc", "Clicks"}}}
	label := &Node{Role: "label", Name: `a "q" <b>`, States: []string{"visible"}, Text: "Grüße & \x01\n"}
	frame := &Node{Role: "frame", Name: "Untitled", States: []string{"visible", "showing"}, Box: &[4]int32{10, 20, 640, 400},
		Children: []*Node{button, label}}
	app := &Node{Role: "application", Name: "mousepad", Children: []*Node{frame}}
	return &Node{Role: "desktop frame", Children: []*Node{app}}
}

// OSWorld's XML: the namespaces on the root, an element per node named by
// its role, the attributes in order, text escaped, and well-formed.
func TestXML(t *testing.T) {
	out := string(XML(sample()))
	for _, want := range []string{
		`<desktop-frame xmlns:st="https://accessibility.ubuntu.example.org/ns/state"`,
		`<application name="mousepad">`,
		`<push-button name="Save" st:visible="true" st:showing="true" st:focusable="true" attr:toolkit="gtk" cp:screencoord="(30, 40)" cp:size="(80, 24)" act:click_desc="Clicks"/>`,
		`<label name="a &quot;q&quot; &lt;b&gt;" st:visible="true">Grüße &amp; ` + "\n</label>",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %s in %s", want, out)
		}
	}
	d := xml.NewDecoder(strings.NewReader(out))
	for {
		if _, err := d.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("not well-formed: %v in %s", err, out)
		}
	}
}

// Cua's tree: role, title, position and size for nodes on screen, the
// text as value, the states.
func TestCuaJSON(t *testing.T) {
	var root cuaNode
	if err := json.Unmarshal(CuaJSON(sample()), &root); err != nil {
		t.Fatal(err)
	}
	frame := root.Children[0].Children[0]
	button, label := frame.Children[0], frame.Children[1]
	switch {
	case root.Role != "desktop frame" || root.Children[0].Title != "mousepad":
		t.Fatalf("root %+v", root)
	case frame.Position == nil || frame.Position.X != 10 || frame.Size.Width != 640:
		t.Fatalf("frame %+v", frame)
	case button.Role != "push button" || button.Title != "Save" || button.Position.Y != 40 || button.Size.Height != 24:
		t.Fatalf("button %+v", button)
	case label.Position != nil || label.Value != "Grüße & \n":
		t.Fatalf("off-screen label %+v: no position, its text as value", label)
	}
}

// The terminal mode finds exactly one focused terminal in an active
// gnome-terminal frame.
func TestFocusedTerminal(t *testing.T) {
	term := func(focused bool) *Node {
		n := &Node{Role: "terminal", Text: "$ ls\n"}
		if focused {
			n.States = []string{"focused"}
		}
		return n
	}
	desk := func(frames ...*Node) *Node {
		return &Node{Children: []*Node{{Role: "application", Name: "gnome-terminal-server", Children: frames}}}
	}
	active := func(kids ...*Node) *Node {
		return &Node{Role: "frame", States: []string{"active"}, Children: []*Node{{Role: "panel", Children: kids}}}
	}
	if n := focusedTerminal(desk(active(term(false), term(true)))); n == nil || n.Text != "$ ls\n" {
		t.Fatalf("one focused terminal: %+v", n)
	}
	if n := focusedTerminal(desk(active(term(true)), active(term(true)))); n != nil {
		t.Fatalf("two focused terminals: %+v, want none", n)
	}
	if n := focusedTerminal(desk(&Node{Role: "frame", Children: []*Node{term(true)}})); n != nil {
		t.Fatalf("inactive frame: %+v, want none", n)
	}
	if got := string(TerminalJSON(nil)); got != `{"output":null}` {
		t.Fatalf("no terminal: %s", got)
	}
}

// A relay that ends before its hello says why: no bus is ErrUnavailable.
func TestRelayFailure(t *testing.T) {
	r := relayResult{}
	r.res.ExitCode, r.res.Stderr = exitNoBus, []byte("deskfarm a11y relay: no accessibility bus: org.freedesktop.DBus.Error.ServiceUnknown\n")
	if err := r.failure(); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "ServiceUnknown") {
		t.Fatalf("no bus: %v", err)
	}
	r.res.ExitCode, r.res.Stderr = 1, []byte("Traceback...\nOSError: [Errno 9] Bad file descriptor\n")
	if err := r.failure(); errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "Bad file descriptor") {
		t.Fatalf("crash: %v", err)
	}
}
