package atspi

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// stubPyatspi is the part of pyatspi's API the reader calls, answering a
// desktop with one application, whose frame holds a push button on screen
// and an off-screen label. Written by hand after pyatspi 2.46 (Debian
// bookworm's python3-pyatspi): Accessible.name, childCount,
// getChildAtIndex, getRoleName, getState().getStates() / contains(),
// queryComponent().getExtents(XY_SCREEN), queryText(); unsupported
// interfaces raise NotImplementedError.
const stubPyatspi = `
XY_SCREEN = 0
STATE_SHOWING = "showing"
STATE_FOCUSED = "focused"
STATE_ACTIVE = "active"

class _State:
    def __init__(self, names): self.names = names
    def getStates(self):
        class S:
            def __init__(self, n): self.value_nick = n
        return [S(n) for n in self.names]
    def contains(self, s): return s in self.names

class _Acc:
    def __init__(self, role, name, states=(), box=None, text=None, kids=()):
        self.role, self.name, self.states, self.box, self.text, self.kids = role, name, list(states), box, text, list(kids)
    @property
    def childCount(self): return len(self.kids)
    def getChildAtIndex(self, i): return self.kids[i]
    def getRoleName(self): return self.role
    def getState(self): return _State(self.states)
    def get_attributes(self): return {}
    def queryComponent(self):
        if self.box is None: raise NotImplementedError
        class C:
            def __init__(s, b): s.b = b
            def getExtents(s, _): return s.b
        return C(self.box)
    def queryText(self):
        if self.text is None: raise NotImplementedError
        class T:
            def __init__(s, t): s.t, s.characterCount = t, len(t)
            def getText(s, a, b): return s.t[a:b]
        return T(self.text)
    def _none(self): raise NotImplementedError
    queryImage = querySelection = queryValue = queryAction = _none

_desktop = _Acc("desktop frame", "main", kids=[
    _Acc("application", "mousepad", kids=[
        _Acc("frame", "Untitled", ["visible", "showing"], (10, 20, 640, 400), kids=[
            _Acc("push button", "Save", ["visible", "showing", "focusable"], (30, 40, 80, 24)),
            _Acc("label", "hidden", ["visible"], (0, 0, 5, 5), text="Grüße"),
        ]),
    ]),
])

class Registry:
    @staticmethod
    def getDesktop(i): return _desktop
`

// run runs the reader in mode with the stub (or, when stub is false,
// without any pyatspi on its path).
func run(t *testing.T, mode Mode, stub bool) (stdout, stderr []byte, code int) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3")
	}
	dir := t.TempDir()
	if stub {
		if err := os.WriteFile(filepath.Join(dir, "pyatspi.py"), []byte(stubPyatspi), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	argv := Argv(mode)
	cmd := exec.Command(argv[0], append([]string{"-I"}, argv[1:]...)...) // -I: no user site, no PYTHONPATH
	if stub {
		cmd = exec.Command(argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), "PYTHONPATH="+dir)
	}
	cmd.Stdin = bytes.NewReader(Script)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		return out.Bytes(), errb.Bytes(), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.Bytes(), errb.Bytes(), 0
}

// Cua's mode answers the tree in Cua's node shape (role, title, position,
// size, children), positions only for nodes on screen.
func TestReaderCuaShape(t *testing.T) {
	stdout, stderr, code := run(t, ModeCua, true)
	out, err := Output(ModeCua, code, stdout, stderr)
	if err != nil {
		t.Fatal(err)
	}
	type node struct {
		Role     string
		Title    string
		Position *struct{ X, Y int }
		Size     *struct{ Width, Height int }
		Value    string
		States   []string
		Children []node
	}
	var root node
	if err := json.Unmarshal(out, &root); err != nil {
		t.Fatalf("%v in %s", err, out)
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
	case label.Position != nil || label.Value != "Grüße":
		t.Fatalf("off-screen label %+v: no position, its text as value", label)
	case !strings.Contains(strings.Join(button.States, " "), "focusable"):
		t.Fatalf("button states %q", button.States)
	}
}

// OSWorld's mode walks the same tree into its XML.
func TestReaderOSWorldXML(t *testing.T) {
	stdout, stderr, code := run(t, ModeOSWorld, true)
	out, err := Output(ModeOSWorld, code, stdout, stderr)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`<desktop-frame xmlns:st=`, `<push-button name="Save" st:visible="true" st:showing="true" st:focusable="true" cp:screencoord="(30, 40)" cp:size="(80, 24)"/>`, `>Grüße</label>`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("no %s in %s", want, out)
		}
	}
}

// Without pyatspi the reader exits ExitNoATSPI, which is ErrUnavailable.
func TestReaderWithoutATSPI(t *testing.T) {
	if exec.Command("python3", "-I", "-c", "import pyatspi").Run() == nil {
		t.Skip("this host has pyatspi")
	}
	stdout, stderr, code := run(t, ModeCua, false)
	if _, err := Output(ModeCua, code, stdout, stderr); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("exit %d %q: %v, want ErrUnavailable", code, stderr, err)
	}
}
