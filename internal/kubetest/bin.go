package kubetest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/deskfarm/deskfarm/internal/testenv"
)

// binaries are what Start and Kubectl run, from scripts/kube/build.sh's
// cache dir.
var binaries = []string{"etcd", "kube-apiserver", "kubectl"}

var bins struct {
	once sync.Once
	dir  string
	err  error // why the binaries are not there (skip or fail)
}

// binDir returns the dir build.sh caches the binaries in. A test never
// builds them (the apiserver takes minutes): when they are missing it
// skips, or fails in CI, naming the script that builds them. `make test`
// runs it first (make kube).
func binDir(t testing.TB) string {
	t.Helper()
	bins.once.Do(func() { bins.dir, bins.err = findBinaries() })
	if bins.err != nil {
		testenv.Unavailable(t, bins.err.Error())
	}
	return bins.dir
}

// findBinaries finds build.sh's cache dir the way build.sh names it
// ($cache/<versions>-<hash of build.sh and go.mod.in>) to know, without
// running it, that build.sh will not build; then asks build.sh itself,
// which prints the dir at once when cached.
func findBinaries() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	script := filepath.Join(root, "scripts", "kube", "build.sh")
	h := sha256.New()
	for _, f := range []string{script, filepath.Join(root, "scripts", "kube", "go.mod.in")} {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		h.Write(b)
	}
	hash := hex.EncodeToString(h.Sum(nil))[:12]
	cache := os.Getenv("DESKFARM_KUBE_CACHE")
	if cache == "" {
		cache = "/var/cache/deskfarm/kube"
	}
	missing := fmt.Errorf("kube-apiserver, kubectl and etcd are not built in %s/*-%s: run scripts/kube/build.sh (make kube; minutes, once)", cache, hash)
	dirs, _ := filepath.Glob(filepath.Join(cache, "*-"+hash))
	if !slices.ContainsFunc(dirs, complete) {
		return "", missing
	}
	out, err := exec.Command(script).Output()
	if err != nil {
		return "", fmt.Errorf("%s: %w", script, err)
	}
	dir := strings.TrimSpace(string(out))
	if !complete(dir) {
		return "", fmt.Errorf("%s printed %q, which lacks the binaries", script, dir)
	}
	return dir, nil
}

func complete(dir string) bool {
	for _, b := range binaries {
		fi, err := os.Stat(filepath.Join(dir, b))
		if err != nil || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// RepoRoot is the deskfarm module's root, found from the working dir (a
// test runs in its package's dir).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module github.com/deskfarm/deskfarm\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("kubetest: not inside the deskfarm module (no go.mod of github.com/deskfarm/deskfarm above the working dir)")
		}
		dir = parent
	}
}
