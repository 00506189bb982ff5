package kubetest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The test binary doubles as the program run inside a netns: with
// KUBETEST_HELPER=serve it answers HTTP on $ADDR with "hello from $ADDR";
// with KUBETEST_HELPER=get it prints the body of GET $URL (trusting $CA,
// sending $TOKEN).
func TestMain(m *testing.M) {
	switch os.Getenv("KUBETEST_HELPER") {
	case "serve":
		addr := os.Getenv("ADDR")
		err := http.ListenAndServe(addr, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintf(w, "hello from %s", addr)
		}))
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	case "get":
		if err := helperGet(os.Getenv("URL"), os.Getenv("CA"), os.Getenv("TOKEN")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func helperGet(url, caFile, token string) error {
	tr := &http.Transport{}
	if caFile != "" {
		ca, err := os.ReadFile(caFile)
		if err != nil {
			return err
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(ca)
		tr.TLSClientConfig = &tls.Config{RootCAs: roots}
	}
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	_, err = os.Stdout.Write(b)
	return err
}

// helper runs the test binary in n as the named helper.
func helper(ctx context.Context, t *testing.T, n *Netns, role string, env ...string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := n.Command(ctx, self)
	cmd.Env = append(append(os.Environ(), "KUBETEST_HELPER="+role), env...)
	return cmd
}

// Two simulated nodes on the bridge: the host reaches a server in a netns
// at the netns's IP, and so does the other netns; the netns are gone after
// cleanup.
func TestNetNSE2E(t *testing.T) {
	var names []string
	t.Run("nodes", func(t *testing.T) {
		a, b := NetNS(t, "node-a"), NetNS(t, "node-b")
		names = []string{a.Name, b.Name}
		if a.IP == b.IP || !strings.HasPrefix(a.IP, bridgeNet) || !strings.HasPrefix(b.IP, bridgeNet) {
			t.Fatalf("netns IPs %s and %s, want two in %s0/24", a.IP, b.IP, bridgeNet)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		srv := helper(ctx, t, a, "serve", "ADDR="+a.Addr(8080))
		srv.Stderr = os.Stderr
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
		want := "hello from " + a.Addr(8080)
		if got := getWhenUp(t, "http://"+a.Addr(8080)+"/"); got != want {
			t.Errorf("host GET of netns %s's server: %q, want %q", a.Name, got, want)
		}
		out, err := helper(ctx, t, b, "get", "URL=http://"+a.Addr(8080)+"/").Output()
		if err != nil {
			t.Fatalf("netns %s GET of netns %s's server: %v %s", b.Name, a.Name, err, stderrOf(err))
		}
		if string(out) != want {
			t.Errorf("netns %s GET of netns %s's server: %q, want %q", b.Name, a.Name, out, want)
		}
	})
	for _, n := range names {
		if _, err := os.Stat("/run/netns/" + n); !os.IsNotExist(err) {
			t.Errorf("netns %s after cleanup: %v, want gone", n, err)
		}
	}
}

// A control plane on the bridge address is reachable from a process in a
// netns, with the harness's CA and admin token.
func TestNetNSAPIServerE2E(t *testing.T) {
	c := Start(t, Options{Host: BridgeIP})
	if !strings.HasPrefix(c.URL, "https://"+BridgeIP+":") {
		t.Fatalf("URL %s, want on %s", c.URL, BridgeIP)
	}
	n := NetNS(t, "agent")
	out, err := helper(context.Background(), t, n, "get", "URL="+c.URL+"/readyz", "CA="+c.CAFile, "TOKEN="+c.Token).Output()
	if err != nil {
		t.Fatalf("apiserver /readyz from netns %s: %v %s", n.Name, err, stderrOf(err))
	}
	if string(out) != "ok" {
		t.Errorf("apiserver /readyz from netns %s: %q, want ok", n.Name, out)
	}
}

// getWhenUp GETs url until the server answers (it is starting), then
// returns the body.
func getWhenUp(t *testing.T, url string) string {
	t.Helper()
	cl := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := cl.Get(url)
		if err == nil {
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
