package kubetest

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The serving certificate verifies against the CA for every name a client
// uses: loopback, localhost, the bridge address it was made for.
func TestPKI(t *testing.T) {
	p, err := writePKI(filepath.Join(t.TempDir(), "pki"), BridgeIP)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(readFile(t, p.caFile)) {
		t.Fatal("CA file holds no certificate")
	}
	block, _ := pem.Decode(readFile(t, p.certFile))
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"127.0.0.1", "localhost", BridgeIP, "kubernetes.default.svc"} {
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err != nil {
			t.Errorf("serving cert for %s: %v", name, err)
		}
	}
	if _, err := cert.Verify(x509.VerifyOptions{DNSName: "10.251.0.9", Roots: roots}); err == nil {
		t.Error("serving cert verifies for 10.251.0.9, an address it was not made for")
	}
	line := strings.TrimSpace(string(readFile(t, p.tokenFile)))
	if f := strings.Split(line, ","); len(f) != 4 || f[0] != p.token || len(p.token) < 32 || f[3] != "system:masters" {
		t.Errorf("token file %q, want TOKEN,user,uid,system:masters with the admin token", line)
	}
}

func readFile(t *testing.T, f string) []byte {
	t.Helper()
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
