package images

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"testing/fstest"
)

// hashTestFS is a two-recipe tree for the hashing tests.
func hashTestFS() fstest.MapFS {
	return fstest.MapFS{
		"one/build.sh":        {Data: []byte("#!/bin/bash\necho one\n")},
		"one/files/rc.xml":    {Data: []byte("<openbox_config/>\n")},
		"one/files/panel":     {Data: []byte("Global {}\n")},
		"two/build.sh":        {Data: []byte("#!/bin/bash\necho two\n")},
		"not-a-recipe/README": {Data: []byte("no build.sh here\n")},
	}
}

// goldenHashOne pins the hash of recipe "one" in hashTestFS: the hash names
// cache directories, so an accidental change of the algorithm would orphan
// every cached image. Change it only together with hashVersion.
const goldenHashOne = "7fc124c3ec7c1d785e20bc234043c0620c873d6800bcc78b8421aa3e2afb8d59"

func TestHashRecipeStable(t *testing.T) {
	fsys := hashTestFS()
	h1, err := hashRecipe(fsys, "one", nil)
	if err != nil {
		t.Fatal(err)
	}
	h2, err := hashRecipe(fsys, "one", nil)
	if err != nil {
		t.Fatal(err)
	}
	if h1 != h2 {
		t.Fatalf("hash not stable: %s then %s", h1, h2)
	}
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(h1) {
		t.Fatalf("hash %q is not 64 hex digits", h1)
	}
	if h1 != goldenHashOne {
		t.Errorf("hash of recipe one = %s, want pinned %s (bump hashVersion if this change is intended)", h1, goldenHashOne)
	}
}

func TestHashRecipeSensitive(t *testing.T) {
	base, err := hashRecipe(hashTestFS(), "one", nil)
	if err != nil {
		t.Fatal(err)
	}
	variants := map[string]func(fstest.MapFS){
		"content changed": func(m fstest.MapFS) { m["one/files/panel"] = &fstest.MapFile{Data: []byte("Global { edge=top }\n")} },
		"file renamed": func(m fstest.MapFS) {
			m["one/files/panel2"] = m["one/files/panel"]
			delete(m, "one/files/panel")
		},
		"file added":   func(m fstest.MapFS) { m["one/extra"] = &fstest.MapFile{Data: nil} },
		"file removed": func(m fstest.MapFS) { delete(m, "one/files/rc.xml") },
		// The same bytes split differently between name and contents.
		"boundary moved": func(m fstest.MapFS) {
			delete(m, "one/files/panel")
			m["one/files/pane"] = &fstest.MapFile{Data: []byte("lGlobal {}\n")}
		},
	}
	for name, mutate := range variants {
		t.Run(name, func(t *testing.T) {
			fsys := hashTestFS()
			mutate(fsys)
			h, err := hashRecipe(fsys, "one", nil)
			if err != nil {
				t.Fatal(err)
			}
			if h == base {
				t.Errorf("hash unchanged after %s", name)
			}
		})
	}

	t.Run("other recipe changed", func(t *testing.T) {
		fsys := hashTestFS()
		fsys["two/build.sh"] = &fstest.MapFile{Data: []byte("#!/bin/bash\necho changed\n")}
		h, err := hashRecipe(fsys, "one", nil)
		if err != nil {
			t.Fatal(err)
		}
		if h != base {
			t.Error("hash of recipe one changed when recipe two did")
		}
	})

	t.Run("extra input", func(t *testing.T) {
		dir := t.TempDir()
		bin := filepath.Join(dir, "init")
		os.WriteFile(bin, []byte("binary v1"), 0o755)
		h1, err := hashRecipe(hashTestFS(), "one", []hashInput{{Name: "init", Path: bin}})
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(bin, []byte("binary v2"), 0o755)
		h2, err := hashRecipe(hashTestFS(), "one", []hashInput{{Name: "init", Path: bin}})
		if err != nil {
			t.Fatal(err)
		}
		if h1 == base || h2 == base || h1 == h2 {
			t.Errorf("extra input not hashed: base %s, v1 %s, v2 %s", base, h1, h2)
		}
	})
}

func TestRecipeNames(t *testing.T) {
	if got, want := recipeNames(hashTestFS()), []string{"one", "two"}; !slices.Equal(got, want) {
		t.Errorf("recipeNames = %v, want %v", got, want)
	}
	if !slices.Contains(Names(), "desktop") {
		t.Errorf("Names() = %v, want it to include desktop", Names())
	}
}

func TestEmbeddedDesktopHash(t *testing.T) {
	s := &Store{CacheDir: t.TempDir()}
	h1, err := s.Hash("desktop")
	if err != nil {
		t.Fatal(err)
	}
	h2, err := s.Hash("desktop")
	if err != nil {
		t.Fatal(err)
	}
	if h1 != h2 || len(h1) != 64 {
		t.Errorf("desktop hash %q then %q", h1, h2)
	}
}

// TestTinyHashReproducible builds the tiny init twice: -trimpath must make
// the binary, and so the recipe hash, the same.
func TestTinyHashReproducible(t *testing.T) {
	if !slices.Contains(Names(), "tiny") {
		t.Skip("no tiny recipe in this tree yet")
	}
	root, ok := findModuleRoot(".")
	if !ok {
		t.Skip("not run inside the deskfarm module")
	}
	if _, err := os.Stat(filepath.Join(root, "images", "tiny", "init")); err != nil {
		t.Skipf("tiny init source missing: %v", err)
	}
	s := &Store{CacheDir: t.TempDir(), SourceDir: root}
	h1, err := s.Hash("tiny")
	if err != nil {
		t.Fatal(err)
	}
	h2, err := s.Hash("tiny")
	if err != nil {
		t.Fatal(err)
	}
	if h1 != h2 {
		t.Errorf("tiny hash not reproducible: %s then %s", h1, h2)
	}
}

func TestSourceDir(t *testing.T) {
	s := &Store{SourceDir: t.TempDir()}
	if _, err := s.sourceDir(); err == nil {
		t.Error("sourceDir accepted a directory without the deskfarm go.mod")
	}
	root, ok := findModuleRoot(".")
	if !ok {
		t.Skip("not run inside the deskfarm module")
	}
	if !isModuleRoot(root) {
		t.Errorf("findModuleRoot returned %s, which isModuleRoot rejects", root)
	}
	s = &Store{}
	if got, err := s.sourceDir(); err != nil || got != root {
		t.Errorf("default sourceDir = %q, %v; want %q", got, err, root)
	}
}
