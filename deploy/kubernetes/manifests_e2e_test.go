// Package kubernetes holds deskfarm's Kubernetes manifests; its test checks
// each of them against a real kube-apiserver.
package kubernetes

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/deskfarm/deskfarm/internal/kubetest"
)

// manifests are every YAML file here but the CRDs (which InstallCRDs
// applies for real).
func manifests(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path == "crds" {
			return filepath.SkipDir
		}
		if !d.IsDir() && (strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// crdsInstalled reports whether deploy/kubernetes/crds holds any CRD.
func crdsInstalled(t *testing.T) bool {
	m, err := filepath.Glob(filepath.Join("crds", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return len(m) > 0
}

// Every manifest passes the apiserver's own validation and admission
// (kubectl apply --dry-run=server), and a broken one does not, so the
// check can fail; the agents' Role grants what they need and no more.
func TestManifestsE2E(t *testing.T) {
	c := kubetest.Start(t, kubetest.Options{})
	c.InstallCRDs(t)
	ctx := context.Background()
	// A dry-run creates no namespace, so the namespaced objects' one must
	// exist first.
	if _, err := c.Kubectl(ctx, "apply", "-f", "namespace.yaml"); err != nil {
		t.Fatal(err)
	}
	files := manifests(t)
	for _, want := range []string{"namespace.yaml", "rbac.yaml", "daemonset.yaml", "service.yaml", "secret.example.yaml", "examples/pool-tiny.yaml"} {
		if !slices.Contains(files, want) {
			t.Errorf("manifest %s missing (found %v)", want, files)
		}
	}
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			if strings.Contains(read(t, f), "deskfarm.dev/v1alpha1") && !crdsInstalled(t) {
				t.Skip("no CRDs in deploy/kubernetes/crds yet")
			}
			out, err := c.Kubectl(ctx, "apply", "--dry-run=server", "-f", f)
			if err != nil {
				t.Fatalf("rejected: %v", err)
			}
			t.Logf("%s", strings.TrimSpace(out))
		})
	}

	t.Run("rejects", func(t *testing.T) {
		broken := map[string]struct{ from, to, field string }{
			"daemonset maxUnavailable -1": {"maxUnavailable: 1", "maxUnavailable: -1", "maxUnavailable"},
			"daemonset no volume":         {"- name: kvm\n          hostPath", "- name: kvm2\n          hostPath", "volumeMounts"},
		}
		if crdsInstalled(t) {
			broken["pool warmPerNode -1"] = struct{ from, to, field string }{"warmPerNode: 1", "warmPerNode: -1", "warmPerNode"}
		}
		for name, b := range broken {
			t.Run(name, func(t *testing.T) {
				src := "daemonset.yaml"
				if strings.HasPrefix(name, "pool") {
					src = "examples/pool-tiny.yaml"
				}
				orig := read(t, src)
				if !strings.Contains(orig, b.from) {
					t.Fatalf("%s no longer contains %q: update this test", src, b.from)
				}
				f := filepath.Join(t.TempDir(), filepath.Base(src))
				if err := os.WriteFile(f, []byte(strings.Replace(orig, b.from, b.to, 1)), 0o644); err != nil {
					t.Fatal(err)
				}
				_, err := c.Kubectl(ctx, "apply", "--dry-run=server", "-f", f)
				var ke *kubetest.KubectlError
				if !errors.As(err, &ke) {
					t.Fatalf("broken %s accepted (err %v)", src, err)
				}
				if !strings.Contains(ke.Stderr, b.field) {
					t.Errorf("broken %s rejected without naming %s: %s", src, b.field, ke.Stderr)
				}
			})
		}
	})

	// The Role, applied for real, as the agents' ServiceAccount sees it.
	t.Run("rbac", func(t *testing.T) {
		if _, err := c.Kubectl(ctx, "apply", "-f", "rbac.yaml"); err != nil {
			t.Fatal(err)
		}
		agent := "--as=system:serviceaccount:deskfarm:deskfarm-agent"
		for _, q := range []struct {
			verb, resource string
			allowed        bool
		}{
			{"update", "desktops.deskfarm.dev", true},
			{"create", "desktops.deskfarm.dev", true},
			{"delete", "desktops.deskfarm.dev", true},
			{"watch", "desktoppools.deskfarm.dev", true},
			{"update", "desktoppools.deskfarm.dev/status", true},
			{"update", "desktoppools.deskfarm.dev", false},
			{"watch", "desktopclaims.deskfarm.dev", true},
			{"update", "desktopclaims.deskfarm.dev/status", true},
			{"delete", "desktopclaims.deskfarm.dev", false},
			{"update", "leases.coordination.k8s.io", true},
			{"delete", "leases.coordination.k8s.io", false},
			{"get", "secrets", false},
			{"list", "pods", false},
		} {
			// kubectl resolves the resource by discovery: deskfarm's are
			// there only with the CRDs.
			if strings.Contains(q.resource, "deskfarm.dev") && !crdsInstalled(t) {
				continue
			}
			args := []string{"auth", "can-i", q.verb, q.resource, "-n", "deskfarm", agent}
			if strings.HasSuffix(q.resource, "/status") {
				res, sub, _ := strings.Cut(q.resource, "/")
				args = []string{"auth", "can-i", q.verb, res, "--subresource=" + sub, "-n", "deskfarm", agent}
			}
			out, err := c.Kubectl(ctx, args...)
			// can-i answers "no" with exit status 1.
			got := strings.TrimSpace(out) == "yes"
			if err != nil && strings.TrimSpace(out) != "no" {
				t.Fatalf("%v", err)
			}
			if got != q.allowed {
				t.Errorf("agent can %s %s: %v, want %v", q.verb, q.resource, got, q.allowed)
			}
		}
		// Nothing outside its namespace.
		out, _ := c.Kubectl(ctx, "auth", "can-i", "update", "leases.coordination.k8s.io", "-n", "default", agent)
		if strings.TrimSpace(out) != "no" {
			t.Errorf("agent can update leases in namespace default: %q, want no", out)
		}
	})
}

func read(t *testing.T, f string) string {
	t.Helper()
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
