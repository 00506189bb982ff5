package desk

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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
