package images_test

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/deskfarm/deskfarm/internal/testenv"
)

// chromiumPak is the real capture the rewrite is tested on: the locale
// pack of the host's Chromium, the same Debian package (bookworm's
// chromium) the osworld image installs; setup-host.sh installs it for the
// web tests.
const chromiumPak = "/usr/lib/chromium/locales/en-US.pak"

// pak is a parsed version 5 pack: resources in file order, and the raw
// alias table.
type pak struct {
	ids     []uint16
	data    map[uint16][]byte
	aliases []byte
}

func parsePak(t *testing.T, b []byte) pak {
	t.Helper()
	if len(b) < 12 || binary.LittleEndian.Uint32(b) != 5 {
		t.Fatalf("not a version 5 pack (%d bytes)", len(b))
	}
	n := int(binary.LittleEndian.Uint16(b[8:]))
	na := int(binary.LittleEndian.Uint16(b[10:]))
	entry := func(i int) (uint16, uint32) {
		o := 12 + 6*i
		return binary.LittleEndian.Uint16(b[o:]), binary.LittleEndian.Uint32(b[o+2:])
	}
	p := pak{data: map[uint16][]byte{}}
	for i := range n {
		id, off := entry(i)
		_, next := entry(i + 1)
		if off > next || int(next) > len(b) {
			t.Fatalf("resource %d: offsets %d..%d out of the file's %d bytes", id, off, next, len(b))
		}
		p.ids = append(p.ids, id)
		p.data[id] = b[off:next]
	}
	at := 12 + 6*(n+1)
	p.aliases = b[at : at+4*na]
	return p
}

// TestChromeNamesRewritesChromiumsPak: the image's chrome-names.py, run on
// Chromium's real locale pack, gives a pack Chromium reads (the same
// resources, ids and aliases) whose window title format is Chrome's, with
// no "Chromium" left as a word, and every string that did not name
// Chromium byte for byte as it was. (Chromium showing "… - Google Chrome"
// with such a pack was seen on the host under Xvfb; TestE2EOSWorldImage
// reads the title in the image.)
func TestChromeNamesRewritesChromiumsPak(t *testing.T) {
	orig, err := os.ReadFile(chromiumPak)
	if err != nil {
		testenv.Unavailable(t, "no Chromium locale pack to test on: "+err.Error())
	}
	dir := t.TempDir()
	work := filepath.Join(dir, "en-US.pak")
	if err := os.WriteFile(work, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("python3", "recipes/osworld/chrome-names.py", work).CombinedOutput()
	if err != nil {
		t.Fatalf("chrome-names.py: %v\n%s", err, out)
	}
	got, err := os.ReadFile(work)
	if err != nil {
		t.Fatal(err)
	}
	before, after := parsePak(t, orig), parsePak(t, got)
	if len(before.ids) != len(after.ids) || !bytes.Equal(before.aliases, after.aliases) {
		t.Fatalf("resources %d -> %d, aliases equal %v", len(before.ids), len(after.ids), bytes.Equal(before.aliases, after.aliases))
	}
	word := regexp.MustCompile(`(^|[^A-Za-z])Chromium([^A-Za-z]|$)`)
	titles, renamed := 0, 0
	for i, id := range before.ids {
		if after.ids[i] != id {
			t.Fatalf("resource %d is %d after, want %d: the order changed", i, after.ids[i], id)
		}
		b, a := before.data[id], after.data[id]
		if word.Match(a) {
			t.Errorf("resource %d still names Chromium: %q", id, a)
		}
		if !word.Match(b) {
			if !bytes.Equal(a, b) {
				t.Errorf("resource %d changed though it names no Chromium: %q -> %q", id, b, a)
			}
			continue
		}
		renamed++
		if string(b) == "$1 - Chromium" {
			titles++
			if string(a) != "$1 - Google Chrome" {
				t.Errorf("the title format is %q, want \"$1 - Google Chrome\"", a)
			}
		}
	}
	if titles != 1 || renamed < 100 {
		t.Fatalf("%d title formats and %d strings renamed; want the one title format among hundreds", titles, renamed)
	}
	t.Logf("%d of %d strings renamed: %s", renamed, len(before.ids), strings.TrimSpace(string(out)))

	// A pack in a form it does not know fails, naming what it found,
	// rather than leaving Chromium's titles in the image.
	v4 := filepath.Join(dir, "v4.pak")
	old := append([]byte{4, 0, 0, 0}, orig[4:]...)
	if err := os.WriteFile(v4, old, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command("python3", "recipes/osworld/chrome-names.py", v4).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "pack version 4; only version 5 is known") {
		t.Fatalf("a version 4 pack: err %v, output %q", err, out)
	}
	if b, _ := os.ReadFile(v4); !bytes.Equal(b, old) {
		t.Fatal("the refused pack was changed")
	}
}
