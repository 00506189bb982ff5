package images

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// DefaultCacheDir is where images are cached when Store.CacheDir is empty.
const DefaultCacheDir = "/var/cache/deskfarm"

// Files of a built image, in its cache directory.
const (
	DiskFile     = "disk.qcow2"
	KernelFile   = "vmlinuz"
	InitrdFile   = "initrd.img"
	CmdlineFile  = "cmdline"
	ManifestFile = "manifest.json"
)

// outputFiles are the files build.sh must write, in manifest order.
var outputFiles = []string{DiskFile, KernelFile, InitrdFile, CmdlineFile}

// Image is a built image in the cache.
type Image struct {
	Name string // recipe name, e.g. "desktop"
	Hash string // full recipe hash (64 hex digits)
	Dir  string // cache directory, CacheDir/images/<name>-<hash12>
	// Disk is the read-only whole-disk qcow2; VMs use it as a backing file.
	Disk   string
	Kernel string // kernel for direct boot
	Initrd string // initramfs for direct boot
	// Cmdline is the kernel command line base (root=..., console=...); the
	// VM layer appends its own parameters such as video= and deskfarm.screen=.
	Cmdline string
	// Build names this build of the recipe. Two builds of one recipe are
	// two disks (mkfs.ext4's UUIDs and hash seed, the Debian packages of
	// the day), so anything that holds a guest's RAM over the disk (a
	// saved ready state, a fork template) is good only on the build it
	// was made on. A copy of the cache entry keeps it.
	Build   string
	BuiltAt time.Time
	// SizeBytes is the apparent size of the image's files together.
	SizeBytes int64
}

// Store builds images and keeps them in a cache directory.
type Store struct {
	// CacheDir holds images/, logs/ and lock files; default DefaultCacheDir.
	CacheDir string
	// SourceDir is the deskfarm module root, needed by recipes built from
	// this module's source (tiny's init). Default: the module root above
	// the current directory, else the tree this package was compiled in.
	SourceDir string
	// Log receives structured records (keys image, op, hash, ...); nil
	// means slog.Default().
	Log *slog.Logger
	// Progress receives human progress lines during builds and prunes,
	// "[desktop] step 2/6: install desktop packages (24s)"; nil: none.
	Progress io.Writer

	// Test hooks.
	recipes   fs.FS               // recipe directories; nil: the embedded ones
	preparers map[string]preparer // host-side preparation; nil: defaultPreparers
	tick      time.Duration       // still-working interval; 0: 15 s
}

func (s *Store) cacheDir() string {
	if s.CacheDir == "" {
		return DefaultCacheDir
	}
	return s.CacheDir
}

func (s *Store) imagesDir() string { return filepath.Join(s.cacheDir(), "images") }
func (s *Store) logsDir() string   { return filepath.Join(s.cacheDir(), "logs") }

// entryName is the cache entry of a recipe hash: "<name>-<hash12>".
func entryName(name, hash string) string { return name + "-" + hash[:12] }

func (s *Store) imageDir(name, hash string) string {
	return filepath.Join(s.imagesDir(), entryName(name, hash))
}

func (s *Store) logPath(name, hash string) string {
	return filepath.Join(s.logsDir(), entryName(name, hash)+".log")
}

func (s *Store) log() *slog.Logger {
	if s.Log == nil {
		return slog.Default()
	}
	return s.Log
}

func (s *Store) fsys() fs.FS {
	if s.recipes == nil {
		return embeddedRecipes()
	}
	return s.recipes
}

func (s *Store) names() []string { return recipeNames(s.fsys()) }

func (s *Store) progressf(format string, args ...any) {
	if s.Progress != nil {
		fmt.Fprintf(s.Progress, format+"\n", args...)
	}
}

// checkName returns ErrUnknownImage, listing the known names, when name is
// not a recipe.
func (s *Store) checkName(name string) error {
	names := s.names()
	for _, n := range names {
		if n == name {
			return nil
		}
	}
	return fmt.Errorf("%w %q (known: %s)", ErrUnknownImage, name, strings.Join(names, ", "))
}

// prepare runs the recipe's host-side preparation, if it has one, in workDir.
func (s *Store) prepare(ctx context.Context, name, workDir string) (prepared, error) {
	preps := s.preparers
	if preps == nil {
		preps = defaultPreparers
	}
	if p := preps[name]; p != nil {
		return p(ctx, s, workDir)
	}
	return prepared{}, nil
}

// Hash returns the current hash of recipe name: its files, and for tiny the
// embedded source of its init.
func (s *Store) Hash(name string) (string, error) {
	if err := s.checkName(name); err != nil {
		return "", fmt.Errorf("hash image: %w", err)
	}
	h, err := hashRecipe(s.fsys(), name, s.hashInputs(name))
	if err != nil {
		return "", fmt.Errorf("hash image %s: %w", name, err)
	}
	return h, nil
}

func (s *Store) hashInputs(name string) []hashInput {
	if s.recipes != nil { // test recipes have no embedded source
		return nil
	}
	return sourceInputs(name)
}

// Get returns the cached image for the current hash of recipe name:
// ErrUnknownImage, ErrNotBuilt when there is none, ErrBroken when it is
// unusable.
func (s *Store) Get(name string) (Image, error) {
	h, err := s.Hash(name)
	if err != nil {
		return Image{}, fmt.Errorf("get image: %w", err)
	}
	return s.load(name, h)
}

// Ensure returns the cached image for recipe name, building it first when
// it is missing or broken.
func (s *Store) Ensure(ctx context.Context, name string) (Image, error) {
	img, err := s.Get(name)
	if err == nil {
		return img, nil
	}
	if !errors.Is(err, ErrNotBuilt) && !errors.Is(err, ErrBroken) {
		return Image{}, err
	}
	s.log().Info("image needs a build", "op", "ensure", "image", name, "reason", err.Error())
	return s.Build(ctx, name, false)
}

// manifest is manifest.json of a cache entry.
type manifest struct {
	Name string `json:"name"`
	Hash string `json:"hash"`
	// BuildID is random per build; manifests from before it had none
	// (Image.Build is then their build time).
	BuildID      string           `json:"build_id,omitempty"`
	BuiltAt      time.Time        `json:"built_at"`
	BuildSeconds float64          `json:"build_seconds"`
	Sizes        map[string]int64 `json:"sizes"` // bytes, by file name
	Steps        []stepRecord     `json:"steps,omitempty"`
}

// build is the manifest's Image.Build: its BuildID, or for a manifest
// from before build IDs its build time (whole seconds).
func (m manifest) build() string {
	if m.BuildID != "" {
		return m.BuildID
	}
	return "t" + strconv.FormatInt(m.BuiltAt.Unix(), 10)
}

// newBuildID is a build's random name: 16 hex digits.
func newBuildID() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b[:])
}

func readManifest(dir string) (manifest, error) {
	var m manifest
	data, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("parse %s: %w", ManifestFile, err)
	}
	return m, nil
}

// load checks the cache entry of (name, hash) and returns it as an Image.
func (s *Store) load(name, hash string) (Image, error) {
	dir := s.imageDir(name, hash)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return Image{}, fmt.Errorf("get image %s: %w: no build of recipe hash %s in %s (deskfarm image build %s)",
			name, ErrNotBuilt, hash[:12], s.imagesDir(), name)
	} else if err != nil {
		return Image{}, fmt.Errorf("get image %s: %w", name, err)
	}
	broken := func(format string, args ...any) (Image, error) {
		return Image{}, fmt.Errorf("get image %s: %w: %s: %s", name, ErrBroken, dir, fmt.Sprintf(format, args...))
	}
	m, err := readManifest(dir)
	if err != nil {
		return broken("bad %s: %v", ManifestFile, err)
	}
	if m.Name != name || m.Hash != hash {
		return broken("%s is for %s %.12s", ManifestFile, m.Name, m.Hash)
	}
	var total int64
	for _, f := range outputFiles {
		st, err := os.Stat(filepath.Join(dir, f))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return broken("missing %s", f)
		case err != nil:
			return broken("%v", err)
		case st.Size() == 0:
			return broken("empty %s", f)
		case st.Size() != m.Sizes[f]:
			return broken("%s has %d bytes, %s says %d", f, st.Size(), ManifestFile, m.Sizes[f])
		}
		total += st.Size()
	}
	cmdline, err := os.ReadFile(filepath.Join(dir, CmdlineFile))
	if err != nil {
		return broken("%v", err)
	}
	line := strings.TrimSpace(string(cmdline))
	if line == "" || strings.Contains(line, "\n") {
		return broken("%s must be one non-empty line", CmdlineFile)
	}
	return Image{
		Name:      name,
		Hash:      hash,
		Dir:       dir,
		Disk:      filepath.Join(dir, DiskFile),
		Kernel:    filepath.Join(dir, KernelFile),
		Initrd:    filepath.Join(dir, InitrdFile),
		Cmdline:   line,
		Build:     m.build(),
		BuiltAt:   m.BuiltAt,
		SizeBytes: total,
	}, nil
}

// Status says what the cache holds for a recipe or cache entry.
type Status string

// Statuses in a Listing.
const (
	StatusBuilt    Status = "built"     // current hash, usable
	StatusNotBuilt Status = "not built" // current hash, not in the cache
	StatusBroken   Status = "broken"    // current hash, unusable (see Detail)
	StatusStale    Status = "stale"     // an old hash, or a recipe that no longer exists; Prune removes it
	StatusUnknown  Status = "unknown"   // the current hash could not be computed (see Detail)
	StatusBuilding Status = "building"  // a build in progress (a temporary directory)
)

// Listing is one row of List: a recipe's current build, or another
// directory in the cache.
type Listing struct {
	Name      string
	Hash      string // full hash when known, else the 12-digit prefix from the directory name
	Status    Status
	Detail    string // why broken or unknown
	SizeBytes int64  // 0 when nothing is cached
	Path      string // cache directory; "" when not built
	BuiltAt   time.Time
}

// entryPattern matches cache entry directories, "<name>-<hash12>".
var entryPattern = regexp.MustCompile(`^(.+)-([0-9a-f]{12})$`)

// buildDirPattern matches temporary build directories, ".<name>.build-<random>".
var buildDirPattern = regexp.MustCompile(`^\.(.+)\.build-[0-9]+$`)

// List returns every recipe with its current status, followed by the
// other directories in the cache: stale builds and builds in progress.
func (s *Store) List() ([]Listing, error) {
	var out []Listing
	current := map[string]string{} // entry dir name -> recipe, for current hashes
	unknown := map[string]string{} // recipe -> why its hash is unknown
	for _, name := range s.names() {
		h, err := s.Hash(name)
		if err != nil {
			unknown[name] = err.Error()
			out = append(out, Listing{Name: name, Status: StatusUnknown, Detail: err.Error()})
			continue
		}
		current[entryName(name, h)] = name
		l := Listing{Name: name, Hash: h}
		img, err := s.load(name, h)
		switch {
		case err == nil:
			l.Status, l.SizeBytes, l.Path, l.BuiltAt = StatusBuilt, img.SizeBytes, img.Dir, img.BuiltAt
		case errors.Is(err, ErrNotBuilt):
			l.Status = StatusNotBuilt
		default:
			l.Status, l.Detail, l.Path = StatusBroken, err.Error(), s.imageDir(name, h)
			l.SizeBytes, _ = dirSize(l.Path)
		}
		out = append(out, l)
	}

	entries, err := os.ReadDir(s.imagesDir())
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return out, fmt.Errorf("list images: %w", err)
	}
	var others []Listing
	for _, e := range entries {
		if !e.IsDir() || current[e.Name()] != "" {
			continue
		}
		dir := filepath.Join(s.imagesDir(), e.Name())
		if m := buildDirPattern.FindStringSubmatch(e.Name()); m != nil {
			if held, _ := lockHeld(filepath.Join(dir, buildLockFile)); held {
				others = append(others, Listing{Name: m[1], Status: StatusBuilding, Path: dir})
			}
			continue
		}
		m := entryPattern.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		l := Listing{Name: m[1], Hash: m[2], Status: StatusStale, Path: dir}
		if why, ok := unknown[m[1]]; ok {
			l.Status, l.Detail = StatusUnknown, "cached build; current hash unknown: "+why
		}
		if man, err := readManifest(dir); err == nil {
			l.Hash, l.BuiltAt = man.Hash, man.BuiltAt
		}
		l.SizeBytes, _ = dirSize(dir)
		others = append(others, l)
	}
	sort.Slice(others, func(i, j int) bool {
		if others[i].Name != others[j].Name {
			return others[i].Name < others[j].Name
		}
		return others[i].BuiltAt.After(others[j].BuiltAt)
	})
	return append(out, others...), nil
}

// Prune removes cached builds of old hashes (and of recipes that no longer
// exist), their logs, and temporary directories of builds that died. It
// keeps builds whose files a process still has open (a running VM's QEMU
// holds its backing file) and, for recipes whose current hash cannot be
// computed, every build; both are reported in the returned error.
func (s *Store) Prune() error {
	log := s.log().With("op", "prune")
	keep := map[string]bool{}
	unknown := map[string]error{}
	for _, name := range s.names() {
		h, err := s.Hash(name)
		if err != nil {
			unknown[name] = err
			continue
		}
		keep[entryName(name, h)] = true
	}
	entries, err := os.ReadDir(s.imagesDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("prune images: %w", err)
	}
	var errs []error
	for name, err := range unknown {
		errs = append(errs, fmt.Errorf("prune images: kept every build of %s: %w", name, err))
	}
	for _, e := range entries {
		p := filepath.Join(s.imagesDir(), e.Name())
		switch {
		case e.IsDir() && buildDirPattern.MatchString(e.Name()):
			if stale, err := staleBuildDir(p); err != nil || !stale {
				continue
			}
			if err := removeTree(p); err != nil {
				errs = append(errs, fmt.Errorf("prune images: %w", err))
				continue
			}
			log.Info("removed dead build directory", "dir", p)
			s.progressf("[prune] removed dead build directory %s", p)

		case e.IsDir() && entryPattern.MatchString(e.Name()):
			m := entryPattern.FindStringSubmatch(e.Name())
			if keep[e.Name()] || unknown[m[1]] != nil {
				continue
			}
			if pid, file := openedUnder(p); pid != 0 {
				errs = append(errs, fmt.Errorf("prune images: kept %s: process %d has %s open", p, pid, file))
				continue
			}
			size, _ := dirSize(p)
			if err := removeTree(p); err != nil {
				errs = append(errs, fmt.Errorf("prune images: %w", err))
				continue
			}
			os.Remove(filepath.Join(s.logsDir(), e.Name()+".log"))
			removeLockFile(filepath.Join(s.imagesDir(), "."+e.Name()+".lock"))
			log.Info("removed stale image", "image", m[1], "hash", m[2], "dir", p, "bytes", size)
			s.progressf("[prune] removed %s (%s)", e.Name(), FormatSize(size))
		}
	}
	return errors.Join(errs...)
}

// dirSize sums the apparent sizes of the regular files under dir.
func dirSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n, err
}

// FormatSize formats a byte count for people: "1.3 GiB", "820 KiB".
func FormatSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
