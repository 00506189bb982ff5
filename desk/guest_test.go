package desk

import (
	"context"
	"image"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/guestx"
	"github.com/deskfarm/deskfarm/player"
	"github.com/deskfarm/deskfarm/vmm"
)

// Fakes of the guest's xclip and xdotool for pasteScript: xdotool logs its
// keys; a paste key takes effect (the serving xclips log a second
// request) only from key number $TAKES on, as when an application did not
// act on the first.
const (
	fakeXclip = `#!/bin/sh
case " $* " in
*" -o "*) exit 1 ;; # nothing owns the clipboard
*" -verbose "*)
	echo "Waiting for selection request 1 of 1000"
	while [ ! -e "$FAKE/pasted" ]; do sleep 0.02; done
	echo "Waiting for selection request 2 of 1000"
	exec sleep 60 ;;
esac
exit 0
`
	fakeXdotool = `#!/bin/sh
echo "$*" >>"$FAKE/keys"
if [ "$*" = "key --clearmodifiers shift+Insert" ]; then
	n=$(grep -c Insert "$FAKE/keys")
	if [ "$n" -ge "$TAKES" ]; then touch "$FAKE/pasted"; fi
fi
`
)

// runPaste runs pasteScript on text with the fakes; the paste key takes
// effect from key number takes on. It returns the script's stdout and the
// keys xdotool was asked for.
func runPaste(t *testing.T, text string, takes string) (string, []string) {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	for name, src := range map[string]string{"xclip": fakeXclip, "xdotool": fakeXdotool} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("bash", "-c", pasteScript)
	cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"), "FAKE="+dir, "TAKES="+takes)
	cmd.Stdin = strings.NewReader(text)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pasteScript: %v: %s", err, out)
	}
	keys, _ := os.ReadFile(filepath.Join(dir, "keys"))
	return string(out), strings.Split(strings.TrimSpace(string(keys)), "\n")
}

func TestPasteScriptKeys(t *testing.T) {
	out, keys := runPaste(t, "abc ü\nx ✓", "1")
	want := []string{"key --clearmodifiers shift+Insert", "key --clearmodifiers Return", "key --clearmodifiers shift+Insert"}
	if strings.Join(keys, "|") != strings.Join(want, "|") || out != "" {
		t.Fatalf("keys %q, stdout %q; want %q and nothing", keys, out, want)
	}
}

// A paste key no application acts on is pressed again after pasteWait, and
// the retry is reported.
func TestPasteScriptRepeatsIgnoredPasteKey(t *testing.T) {
	if testing.Short() {
		t.Skip("waits pasteWait")
	}
	out, keys := runPaste(t, "ünï", "2")
	want := []string{"key --clearmodifiers shift+Insert", "key --clearmodifiers shift+Insert"}
	if strings.Join(keys, "|") != strings.Join(want, "|") {
		t.Fatalf("keys %q, want %q", keys, want)
	}
	if !strings.Contains(out, "line 1: no selection request within "+pasteWait+" ms of paste key 1") {
		t.Fatalf("stdout %q does not report the ignored key", out)
	}
}

func TestParseMouseLocation(t *testing.T) {
	// xdotool 3.20160805 getmouselocation --shell, in a desktop VM.
	p, err := parseMouseLocation("X=640\nY=399\nSCREEN=0\nWINDOW=1234\n")
	if err != nil || p != image.Pt(640, 399) {
		t.Fatalf("%v %v", p, err)
	}
	for _, bad := range []string{"", "X=1\n", "X=a\nY=2\n"} {
		if _, err := parseMouseLocation(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// Before the desk has sent a pointer event, its display cannot say where the
// pointer is; an action that needs it (cursor_position, a click without a
// point) first moves the display's pointer to where the guest has it, so it
// answers instead of failing with actions.ErrPointerUnknown.
func TestPointerFromGuestBeforeAnyPointerEvent(t *testing.T) {
	r := newRig(t, 1)
	vms, _ := r.farm.List(context.Background())
	vm := vms[0].ID
	r.farm.ExecFn = func(req vmm.ExecRequest) (vmm.ExecResult, error) {
		if c, ok := guestx.Unwrap(req); ok && strings.Join(c.Argv, " ") == "xdotool getmouselocation --shell" {
			return vmm.ExecResult{Stdout: []byte("X=320\nY=200\nSCREEN=0\nWINDOW=77\n")}, nil
		}
		return vmm.ExecResult{ExitCode: 1}, nil
	}
	d := r.get(vm)
	disp := r.display(vm)
	disp.mu.Lock()
	disp.noPtr = true
	disp.mu.Unlock()
	quiet := player.RunOptions{Screenshot: player.ScreenshotNever}
	// At half size the guest's native 320,200 is 160,100.
	half := player.ScreenshotSize{Mode: player.SizeFixed, Width: 320, Height: 200}
	res, err := d.Run(context.Background(), half, []actions.Action{actions.CursorPosition{}}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if res.Cursor == nil || *res.Cursor != (image.Point{X: 160, Y: 100}) {
		t.Fatalf("cursor %v (text %q), want 160,100", res.Cursor, res.Text)
	}
	if x, y := disp.CursorPos(); x != 320 || y != 200 {
		t.Fatalf("display pointer at %d,%d, want where the guest has it", x, y)
	}
}
