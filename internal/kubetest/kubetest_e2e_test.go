package kubetest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

func clientset(t *testing.T, c *ControlPlane) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// The harness serves a real apiserver: client-go lists the namespaces
// kube-apiserver makes itself and the one Namespace made, kubectl as the
// admin token is in system:masters, and cleanup leaves nothing.
func TestControlPlaneE2E(t *testing.T) {
	var dir string
	t.Run("serve", func(t *testing.T) {
		c := Start(t, Options{})
		dir = c.Dir()
		if !strings.HasPrefix(dir, DataPrefix) {
			t.Errorf("data dir %s, want under %s*", dir, DataPrefix)
		}
		ns := c.Namespace(t)
		ctx := context.Background()
		list, err := clientset(t, c).CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("list namespaces: %v", err)
		}
		var names []string
		for _, n := range list.Items {
			names = append(names, n.Name)
		}
		for _, want := range []string{"default", "kube-system", ns} {
			if !slices.Contains(names, want) {
				t.Errorf("namespaces %v lack %s", names, want)
			}
		}
		who, err := c.Kubectl(ctx, "auth", "whoami", "-o", "jsonpath={.status.userInfo.groups}")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(who, "system:masters") {
			t.Errorf("kubectl auth whoami groups %q, want system:masters", who)
		}
		_, err = c.Kubectl(ctx, "get", "configmap", "no-such-map", "-n", ns)
		var ke *KubectlError
		if !errors.As(err, &ke) || !strings.Contains(ke.Stderr, "NotFound") {
			t.Errorf("kubectl get of a missing object: %v, want a KubectlError saying NotFound", err)
		}
	})
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("data dir %s after cleanup: %v, want removed", dir, err)
	}
}

// An object written before the apiserver stops is served after it starts
// again (etcd kept it), and while it is down calls fail rather than hang.
func TestAPIServerRestartE2E(t *testing.T) {
	c := Start(t, Options{})
	ns := c.Namespace(t)
	cs := clientset(t, c)
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept"}, Data: map[string]string{"k": "before the outage"}}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.StopAPIServer(t)
	down, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cs.CoreV1().ConfigMaps(ns).Get(down, "kept", metav1.GetOptions{}); err == nil {
		t.Fatal("get with the apiserver stopped succeeded")
	}
	c.StartAPIServer(t)
	got, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "kept", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get after restart: %v", err)
	}
	if got.Data["k"] != "before the outage" {
		t.Errorf("after restart data %v, want k=before the outage", got.Data)
	}
}

// CRDs from a dir are served once applyCRDs returns: their objects are
// validated by their schema. deploy/kubernetes/crds (empty or not) installs
// too.
func TestInstallCRDsE2E(t *testing.T) {
	c := Start(t, Options{})
	c.InstallCRDs(t)
	c.applyCRDs(t, filepath.Join("testdata", "crds"))
	ns := c.Namespace(t)
	ctx := context.Background()
	good := filepath.Join(t.TempDir(), "good.yaml")
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	writeFile(t, good, "apiVersion: kubetest.deskfarm.dev/v1\nkind: Widget\nmetadata: {name: w}\nspec: {size: 3}\n")
	writeFile(t, bad, "apiVersion: kubetest.deskfarm.dev/v1\nkind: Widget\nmetadata: {name: w2}\nspec: {size: -1}\n")
	if out, err := c.Kubectl(ctx, "apply", "-n", ns, "-f", good); err != nil {
		t.Fatalf("valid Widget: %v", err)
	} else if !strings.Contains(out, "widget.kubetest.deskfarm.dev/w created") {
		t.Errorf("apply said %q", out)
	}
	_, err := c.Kubectl(ctx, "apply", "-n", ns, "-f", bad)
	var ke *KubectlError
	if !errors.As(err, &ke) || !strings.Contains(ke.Stderr, "spec.size") {
		t.Errorf("Widget with size -1: %v, want rejected naming spec.size", err)
	}
	out, err := c.Kubectl(ctx, "get", "widgets", "-n", ns, "-o", "name")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out) != "widget.kubetest.deskfarm.dev/w" {
		t.Errorf("widgets %q, want only w", out)
	}
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
