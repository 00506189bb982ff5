// Package kubetest runs a real Kubernetes control plane for tests: etcd and
// kube-apiserver, built by scripts/kube/build.sh from the Go module proxy,
// with fresh PKI and data per test. There is no kubelet, scheduler or
// controller-manager: Leases, CRDs, optimistic concurrency, RBAC and
// admission all work, but nothing a controller does happens (no pods, no
// garbage collection, and a namespace never finishes deleting, which is why
// Namespace hands out a fresh one per test).
//
// Node pods are simulated by agents the tests start in network namespaces
// (NetNS), joined to one host bridge; a control plane started with
// Options{Host: BridgeIP} is reachable from all of them.
//
// Recipe, flags and traps: /work/shared/research/kubernetes-local.md.
package kubetest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/internal/testenv"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// DataPrefix names the per-control-plane data dirs: under /var/lib like
// every other test state dir (never /tmp), one per Start, removed on cleanup.
const DataPrefix = "/var/lib/deskfarm-test-kube-"

// readyWait bounds how long etcd and kube-apiserver may take to answer
// healthy. /readyz takes about 3 s on an idle 2-core machine (research
// note §7); a loaded CI machine can take many times that.
const readyWait = 2 * time.Minute

// Options configure Start.
type Options struct {
	// Host is the address kube-apiserver binds to and advertises, and the
	// one in its URL. Default 127.0.0.1; BridgeIP makes it reachable from
	// NetNS agents (Start then creates the bridge if needed). etcd always
	// listens on 127.0.0.1 only.
	Host string
}

// ControlPlane is a running etcd and kube-apiserver.
type ControlPlane struct {
	// Kubeconfig is an admin kubeconfig file (a system:masters token).
	Kubeconfig string
	// Config is the admin connection, its client rate limit raised.
	Config *rest.Config
	// URL is the apiserver's https URL; CAFile its CA; Token the admin
	// bearer token.
	URL, CAFile, Token string

	dir       string
	bin       string
	etcd      *proc
	apiserver *proc
}

// Start runs etcd and kube-apiserver with fresh PKI and data under a
// DataPrefix dir, on opts.Host at free ports. t.Cleanup stops both and
// removes the dir. It skips (testenv) when the binaries are not built, and
// fails in CI.
func Start(t testing.TB, opts Options) *ControlPlane {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "kubetest needs root (its data lives under /var/lib)")
	}
	bin := binDir(t)
	host := opts.Host
	if host == "" {
		host = "127.0.0.1"
	}
	if host == BridgeIP {
		Bridge(t)
	}
	dir, err := os.MkdirTemp("/var/lib", filepath.Base(DataPrefix))
	if err != nil {
		t.Fatalf("kubetest: data dir: %v", err)
	}
	c := &ControlPlane{dir: dir, bin: bin}
	t.Cleanup(func() { c.cleanup(t) })

	p, err := writePKI(filepath.Join(dir, "pki"), host)
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	etcdClient, etcdPeer, apiPort := freePort(t, "127.0.0.1"), freePort(t, "127.0.0.1"), freePort(t, host)
	c.URL = "https://" + net.JoinHostPort(host, strconv.Itoa(apiPort))
	c.CAFile, c.Token = p.caFile, p.token
	c.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := writeKubeconfig(c.Kubeconfig, c.URL, c.CAFile, c.Token); err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		t.Fatalf("kubetest: kubeconfig %s: %v", c.Kubeconfig, err)
	}
	// client-go's default 5 QPS would throttle tests that race claims.
	c.Config.QPS, c.Config.Burst = 1000, 2000

	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdClient)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(etcdPeer)
	c.etcd = &proc{name: "etcd", path: filepath.Join(bin, "etcd"), log: filepath.Join(dir, "etcd.log"), args: []string{
		"--name=kubetest", "--data-dir=" + filepath.Join(dir, "etcd"),
		"--listen-client-urls=" + etcdURL, "--advertise-client-urls=" + etcdURL,
		"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=kubetest=" + peerURL,
		// Test data need not survive a power cut; fsync on a disk shared
		// with VM overlays is the slow part of every write.
		"--unsafe-no-fsync", "--log-level=warn",
	}}
	c.apiserver = &proc{name: "kube-apiserver", path: filepath.Join(bin, "kube-apiserver"), log: filepath.Join(dir, "kube-apiserver.log"), args: []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=" + host, "--advertise-address=" + host, "--secure-port=" + strconv.Itoa(apiPort),
		"--tls-cert-file=" + p.certFile, "--tls-private-key-file=" + p.keyFile, "--cert-dir=" + filepath.Join(dir, "certdir"),
		"--token-auth-file=" + p.tokenFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + p.saPubFile, "--service-account-signing-key-file=" + p.saKeyFile,
		"--service-cluster-ip-range=10.0.0.0/24",
		// Without it the apiserver would publish its own (loopback or
		// bridge) address as the kubernetes Service's endpoint.
		"--endpoint-reconciler-type=none",
		// The deskfarm DaemonSet is privileged (/dev/kvm); without this
		// even a dry-run of it is Forbidden.
		"--allow-privileged=true",
		"--v=0",
	}}
	if err := c.etcd.start(); err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	if err := waitHealthy(c.etcd, etcdURL+"/health", nil, ""); err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	c.StartAPIServer(t)
	return c
}

// StopAPIServer stops kube-apiserver (etcd keeps the data), for outage
// tests.
func (c *ControlPlane) StopAPIServer(t testing.TB) {
	t.Helper()
	if err := c.apiserver.stop(); err != nil {
		t.Fatalf("kubetest: %v", err)
	}
}

// StartAPIServer starts kube-apiserver (again) on the same port and data,
// and waits until /readyz answers 200.
func (c *ControlPlane) StartAPIServer(t testing.TB) {
	t.Helper()
	if err := c.apiserver.start(); err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	cl, err := c.httpClient()
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	if err := waitHealthy(c.apiserver, c.URL+"/readyz", cl, c.Token); err != nil {
		t.Fatalf("kubetest: %v", err)
	}
}

// Dir is the control plane's data dir (logs, PKI, etcd data).
func (c *ControlPlane) Dir() string { return c.dir }

func (c *ControlPlane) httpClient() (*http.Client, error) {
	ca, err := os.ReadFile(c.CAFile)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}, nil
}

// cleanup stops both processes and removes the data dir; when the test
// failed it logs the end of each log first.
func (c *ControlPlane) cleanup(t testing.TB) {
	for _, p := range []*proc{c.apiserver, c.etcd} {
		if p == nil {
			continue
		}
		if err := p.stop(); err != nil {
			t.Errorf("kubetest cleanup: %v", err)
		}
		if t.Failed() {
			t.Logf("kubetest: end of %s:\n%s", p.log, tail(p.log, 40))
		}
	}
	if err := os.RemoveAll(c.dir); err != nil {
		t.Errorf("kubetest cleanup: %v", err)
	}
}

// waitHealthy polls url until it answers 200, p exits or readyWait passes.
func waitHealthy(p *proc, url string, cl *http.Client, token string) error {
	if cl == nil {
		cl = &http.Client{Timeout: 5 * time.Second}
	}
	deadline := time.Now().Add(readyWait)
	var last error
	for time.Now().Before(deadline) {
		if p.exited() {
			return fmt.Errorf("%s exited before %s answered: %w\n%s", p.name, url, p.waitErr, tail(p.log, 40))
		}
		req, err := http.NewRequestWithContext(context.Background(), "GET", url, nil)
		if err != nil {
			return err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := cl.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = errors.New(resp.Status)
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s: %s not healthy after %v: %w\n%s", p.name, url, readyWait, last, tail(p.log, 40))
}

// freePort returns a TCP port free on host now. Another process may take
// it before ours binds; on this machine's few concurrent tests that has
// not been seen.
func freePort(t testing.TB, host string) int {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatalf("kubetest: free port on %s: %v", host, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
