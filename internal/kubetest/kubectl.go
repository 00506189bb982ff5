package kubetest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// kubectlTimeout bounds a Kubectl call whose ctx has no deadline: without
// a controller-manager some kubectl commands (delete --wait of a
// namespace) never return.
const kubectlTimeout = time.Minute

// KubectlError is a kubectl run that failed: its arguments, what it wrote
// to stderr and how it ended.
type KubectlError struct {
	Args   []string
	Stderr string
	Err    error
}

func (e *KubectlError) Error() string {
	return fmt.Sprintf("kubectl %s: %v: %s", strings.Join(e.Args, " "), e.Err, strings.TrimSpace(e.Stderr))
}

func (e *KubectlError) Unwrap() error { return e.Err }

// Kubectl runs kubectl with the admin kubeconfig and returns its stdout;
// a failure is a *KubectlError. Without a deadline on ctx it stops after
// a minute.
func (c *ControlPlane) Kubectl(ctx context.Context, args ...string) (string, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, kubectlTimeout)
		defer cancel()
	}
	// Its discovery cache goes in the data dir, not under $HOME/.kube,
	// which would collect one dir per test's port.
	full := append([]string{"--kubeconfig=" + c.Kubeconfig, "--cache-dir=" + filepath.Join(c.dir, "kubectl-cache")}, args...)
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, "kubectl"), full...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), &KubectlError{Args: args, Stderr: stderr.String(), Err: err}
	}
	return stdout.String(), nil
}

// CRDDir is where deskfarm's CRDs live, relative to the repository root.
const CRDDir = "deploy/kubernetes/crds"

// InstallCRDs applies every YAML file in deploy/kubernetes/crds and waits
// until each CRD is Established (its API served).
func (c *ControlPlane) InstallCRDs(t testing.TB) {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	c.applyCRDs(t, filepath.Join(root, CRDDir))
}

// applyCRDs applies the YAML files in dir (none is no error: the CRDs are
// written in parallel with this harness) and waits for the CRDs among
// them to be Established.
func (c *ControlPlane) applyCRDs(t testing.TB, dir string) {
	t.Helper()
	files, err := yamlFiles(dir)
	if err != nil {
		t.Fatalf("kubetest: CRDs: %v", err)
	}
	if len(files) == 0 {
		t.Logf("kubetest: no CRD files in %s", dir)
		return
	}
	args := []string{"apply", "-o", "name"}
	for _, f := range files {
		args = append(args, "-f", f)
	}
	out, err := c.Kubectl(context.Background(), args...)
	if err != nil {
		t.Fatalf("kubetest: install CRDs: %v", err)
	}
	var crds []string
	for _, name := range strings.Fields(out) {
		if strings.HasPrefix(name, "customresourcedefinition.") {
			crds = append(crds, name)
		}
	}
	if len(crds) == 0 {
		return
	}
	wait := append([]string{"wait", "--for=condition=Established", "--timeout=60s"}, crds...)
	if _, err := c.Kubectl(context.Background(), wait...); err != nil {
		t.Fatalf("kubetest: CRDs not established: %v", err)
	}
}

// yamlFiles lists dir's *.yaml and *.yml files, sorted; a missing dir has
// none.
func yamlFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range ents {
		if !e.IsDir() && (strings.HasSuffix(e.Name(), ".yaml") || strings.HasSuffix(e.Name(), ".yml")) {
			files = append(files, filepath.Join(dir, e.Name()))
		}
	}
	return files, nil
}

var notDNS = regexp.MustCompile(`[^a-z0-9]+`)

// Namespace creates a fresh namespace named after the test and returns
// its name. It is never deleted: without a controller-manager a deleted
// namespace stays Terminating for good, and the whole control plane goes
// with the test anyway.
func (c *ControlPlane) Namespace(t testing.TB) string {
	t.Helper()
	base := strings.Trim(notDNS.ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	if len(base) > 40 {
		base = strings.TrimRight(base[:40], "-")
	}
	name := base + "-" + randomHex(3)
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatalf("kubetest: clientset: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("kubetest: create namespace %s: %v", name, err)
	}
	return name
}
