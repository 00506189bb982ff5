package images

import (
	"bytes"
	"io/fs"
	"path"
	"regexp"
	"strings"
	"testing"
)

// TestOSWorldBuildsOnDesktop: the osworld recipe is the desktop recipe with
// a variant. Each file it carries is used (put by variant.sh, or a desktop
// file it replaces) and differs from the desktop's, so nothing is a stale
// copy; the desktop files it replaces are ones the desktop build puts.
// A file may also be a script variant.sh runs itself ("$variant/NAME").
func TestOSWorldBuildsOnDesktop(t *testing.T) {
	fsys := embeddedRecipes()
	base, err := recipeBase(fsys, "osworld")
	if err != nil || base != "desktop" {
		t.Fatalf("osworld's base is %q (%v), want desktop", base, err)
	}
	read := func(p string) []byte {
		t.Helper()
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	put := regexp.MustCompile(`(?m)^\s*put [0-7]+ (\S+) `)
	puts := func(script []byte) map[string]bool {
		m := map[string]bool{}
		for _, sm := range put.FindAllSubmatch(script, -1) {
			m[string(sm[1])] = true
		}
		return m
	}
	desktopPuts := puts(read("desktop/build.sh"))
	variantPuts := puts(read("osworld/variant.sh"))
	// Scripts variant.sh runs on the build host ("$variant/NAME").
	for _, sm := range regexp.MustCompile(`"\$variant/([^"]+)"`).FindAllSubmatch(read("osworld/variant.sh"), -1) {
		variantPuts[string(sm[1])] = true
	}
	files, err := recipeFiles(fsys, "osworld")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		switch f {
		case buildScript, baseFile, "variant.sh":
			continue
		}
		own := read(path.Join("osworld", f))
		if d, err := fs.ReadFile(fsys, path.Join("desktop", f)); err == nil {
			if bytes.Equal(own, d) {
				t.Errorf("recipes/osworld/%s is a copy of the desktop's: delete it, the base provides it", f)
			}
			if !desktopPuts[f] {
				t.Errorf("recipes/osworld/%s replaces a desktop file the desktop build does not put", f)
			}
			continue
		}
		if !variantPuts[f] {
			t.Errorf("recipes/osworld/%s is neither put by variant.sh nor a desktop file it replaces", f)
		}
	}
	for f := range variantPuts {
		if _, err := fs.Stat(fsys, path.Join("osworld", f)); err != nil {
			t.Errorf("variant.sh puts %s, which recipes/osworld lacks", f)
		}
	}
	if !strings.Contains(string(read("desktop/build.sh")), "DESKFARM_VARIANT_DIR") {
		t.Errorf("desktop/build.sh does not take a variant")
	}
}
