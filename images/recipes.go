package images

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
)

// modulePath is the deskfarm module; the tiny recipe's init is built from it.
const modulePath = "github.com/deskfarm/deskfarm"

// buildScript is the file every recipe directory has.
const buildScript = "build.sh"

// hashVersion starts every recipe hash. Change it when the build contract
// changes in a way that makes old cached builds wrong.
const hashVersion = "deskfarm-image-recipe-v1"

//go:embed recipes
var embedded embed.FS

// embeddedRecipes is recipes/ of the embedded tree: one directory per recipe.
func embeddedRecipes() fs.FS {
	sub, err := fs.Sub(embedded, "recipes")
	if err != nil {
		panic(err) // cannot happen: "recipes" is a valid path
	}
	return sub
}

// Names returns the known recipe names, sorted.
func Names() []string {
	return recipeNames(embeddedRecipes())
}

// recipeNames lists the directories of fsys that hold a build.sh.
func recipeNames(fsys fs.FS) []string {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if st, err := fs.Stat(fsys, path.Join(e.Name(), buildScript)); err == nil && st.Mode().IsRegular() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names
}

// recipeFiles returns the regular files of recipe name, as slash paths
// relative to the recipe directory, sorted.
func recipeFiles(fsys fs.FS, name string) ([]string, error) {
	var files []string
	err := fs.WalkDir(fsys, name, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			files = append(files, strings.TrimPrefix(p, name+"/"))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list files of recipe %s: %w", name, err)
	}
	sort.Strings(files)
	return files, nil
}

// hashInput is a host-side file a recipe's build depends on besides its own
// files, such as the tiny image's init binary.
type hashInput struct {
	Name string // stable name used in the hash, not the path
	Path string // read when Data is nil
	Data []byte
}

// tinySource is the Go source of tiny's init, embedded so that the tiny
// recipe's hash is known without a source tree or a compiler: Get must be
// cheap and work in an installed binary. Only Build compiles it.
//
//go:embed tiny/init/*.go tiny/screen/*.go
var tinySource embed.FS

// sourceInputs are the hash inputs of a recipe beyond its own files.
func sourceInputs(name string) []hashInput {
	if name != "tiny" {
		return nil
	}
	var in []hashInput
	_ = fs.WalkDir(tinySource, "tiny", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(p, "_test.go") {
			return err
		}
		data, err := tinySource.ReadFile(p)
		if err != nil {
			return err
		}
		in = append(in, hashInput{Name: p, Data: data})
		return nil
	})
	return in
}

// hashRecipe returns the hex SHA-256 over the recipe's files (names and
// contents, sorted by name), its base recipe's files, and the extra inputs. Each entry is framed as
// kind NUL name NUL size NUL contents, so no two different trees share a
// byte stream.
func hashRecipe(fsys fs.FS, name string, extra []hashInput) (string, error) {
	base, err := recipeBase(fsys, name)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	io.WriteString(h, hashVersion+"\x00")
	for _, r := range []struct{ kind, name string }{{"file", name}, {"base", base}} {
		if r.name == "" {
			continue
		}
		files, err := recipeFiles(fsys, r.name)
		if err != nil {
			return "", err
		}
		for _, f := range files {
			data, err := fs.ReadFile(fsys, path.Join(r.name, f))
			if err != nil {
				return "", fmt.Errorf("hash recipe %s: %w", name, err)
			}
			writeHashEntry(h, r.kind, f, data)
		}
	}
	sorted := append([]hashInput(nil), extra...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	for _, in := range sorted {
		data := in.Data
		if data == nil {
			var err error
			if data, err = os.ReadFile(in.Path); err != nil {
				return "", fmt.Errorf("hash recipe %s: input %s: %w", name, in.Name, err)
			}
		}
		writeHashEntry(h, "input", in.Name, data)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// baseFile names, inside a recipe directory, the recipe it builds on.
const baseFile = "base"

// recipeBase returns the recipe that recipe name builds on ("" for none):
// the name in its file "base". The base's files are extracted beside the
// recipe's for build.sh (DESKFARM_BASE_DIR) and are part of its hash, so a
// fix to the base rebuilds both, and the variant keeps only what differs
// (the osworld image is the desktop recipe with more packages and its own
// session files). One level only: a base has no base.
func recipeBase(fsys fs.FS, name string) (string, error) {
	data, err := fs.ReadFile(fsys, path.Join(name, baseFile))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("recipe %s: read %s: %w", name, baseFile, err)
	}
	base := strings.TrimSpace(string(data))
	if base == name || !slices.Contains(recipeNames(fsys), base) {
		return "", fmt.Errorf("recipe %s: %s names %q; want another recipe (known: %s)",
			name, baseFile, base, strings.Join(recipeNames(fsys), ", "))
	}
	if _, err := fs.Stat(fsys, path.Join(base, baseFile)); err == nil {
		return "", fmt.Errorf("recipe %s: its base %s has a base itself; one level is supported", name, base)
	}
	return base, nil
}

func writeHashEntry(w io.Writer, kind, name string, data []byte) {
	fmt.Fprintf(w, "%s\x00%s\x00%d\x00", kind, name, len(data))
	w.Write(data)
}

// extractRecipe writes recipe name's files into dir. Scripts (files named
// *.sh or starting with "#!") get mode 0755, other files 0644.
func extractRecipe(fsys fs.FS, name, dir string) error {
	files, err := recipeFiles(fsys, name)
	if err != nil {
		return err
	}
	for _, f := range files {
		data, err := fs.ReadFile(fsys, path.Join(name, f))
		if err != nil {
			return fmt.Errorf("extract recipe %s: %w", name, err)
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(f, ".sh") || bytes.HasPrefix(data, []byte("#!")) {
			mode = 0o755
		}
		dst := filepath.Join(dir, filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return fmt.Errorf("extract recipe %s: %w", name, err)
		}
		if err := os.WriteFile(dst, data, mode); err != nil {
			return fmt.Errorf("extract recipe %s: %w", name, err)
		}
	}
	return nil
}

// prepared is what a recipe's host-side preparation produced.
type prepared struct {
	Env []string // extra environment for build.sh, "K=V"
}

// preparer builds a recipe's host-side inputs into the work dir.
type preparer func(ctx context.Context, s *Store, workDir string) (prepared, error)

// defaultPreparers are the recipes that need more than their own files.
var defaultPreparers = map[string]preparer{
	"tiny": prepareTiny,
}

// prepareTiny builds the tiny image's init (a static Go program) into
// WORK/init and passes it to build.sh as DESKFARM_TINY_INIT. -trimpath and
// -buildvcs=false make the binary depend on the source alone, so its hash
// is stable across checkouts and commits.
func prepareTiny(ctx context.Context, s *Store, workDir string) (prepared, error) {
	src, err := s.sourceDir()
	if err != nil {
		return prepared{}, fmt.Errorf("build tiny init: %w", err)
	}
	out := filepath.Join(workDir, "init")
	args := []string{"build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", out, modulePath + "/images/tiny/init"}
	cmd := exec.CommandContext(ctx, goTool(), args...)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if os.Getenv("GOCACHE") == "" && os.Getenv("HOME") == "" && os.Getenv("XDG_CACHE_HOME") == "" {
		// A service without HOME: go build needs a cache directory.
		cmd.Env = append(cmd.Env, "GOCACHE="+filepath.Join(s.cacheDir(), "go-build"))
	}
	if output, err := cmd.CombinedOutput(); err != nil {
		return prepared{}, fmt.Errorf("build tiny init: go %s (in %s): %w\n%s",
			strings.Join(args, " "), src, err, bytes.TrimSpace(output))
	}
	return prepared{
		Env: []string{"DESKFARM_TINY_INIT=" + out},
	}, nil
}

// goTool returns the go command: from PATH, else the toolchain this binary
// was built with, else /usr/local/go.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	for _, p := range []string{filepath.Join(runtime.GOROOT(), "bin", "go"), "/usr/local/go/bin/go"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "go"
}

// sourceDir returns the deskfarm module root: SourceDir if set, else the
// module root above the current directory, else the source tree this
// package was compiled from (absent in -trimpath builds).
func (s *Store) sourceDir() (string, error) {
	if s.SourceDir != "" {
		if !isModuleRoot(s.SourceDir) {
			return "", fmt.Errorf("%w: Store.SourceDir %s has no go.mod for %s", ErrNoSource, s.SourceDir, modulePath)
		}
		return s.SourceDir, nil
	}
	if wd, err := os.Getwd(); err == nil {
		if root, ok := findModuleRoot(wd); ok {
			return root, nil
		}
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		if root := filepath.Dir(filepath.Dir(file)); isModuleRoot(root) {
			return root, nil
		}
	}
	return "", fmt.Errorf("%w: set Store.SourceDir or run from inside the %s checkout", ErrNoSource, modulePath)
}

// findModuleRoot walks up from dir to the directory whose go.mod declares
// the deskfarm module.
func findModuleRoot(dir string) (string, bool) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", false
	}
	for {
		if isModuleRoot(dir) {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

// isModuleRoot reports whether dir/go.mod declares the deskfarm module.
func isModuleRoot(dir string) bool {
	f, err := os.Open(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(line, "module"); ok && rest != "" && (rest[0] == ' ' || rest[0] == '\t') {
			return strings.Trim(strings.TrimSpace(rest), `"`) == modulePath
		}
	}
	return false
}
