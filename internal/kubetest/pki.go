package kubetest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is one control plane's credentials, as files.
type pki struct {
	caFile, certFile, keyFile string // CA; the apiserver's serving cert and key
	saKeyFile, saPubFile      string // service-account token signing key
	tokenFile, token          string // static token file; its system:masters token
}

// writePKI makes a CA, a serving certificate for 127.0.0.1, localhost,
// host and the in-cluster names, a service-account signing key and a
// static token file with one system:masters token, all under dir. ECDSA
// P-256 keys: kube-apiserver takes them for serving and for signing
// service-account tokens (ES256), and they are made in microseconds.
func writePKI(dir, host string) (pki, error) {
	p := pki{
		caFile: filepath.Join(dir, "ca.crt"), certFile: filepath.Join(dir, "apiserver.crt"), keyFile: filepath.Join(dir, "apiserver.key"),
		saKeyFile: filepath.Join(dir, "sa.key"), saPubFile: filepath.Join(dir, "sa.pub"), tokenFile: filepath.Join(dir, "tokens.csv"),
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return p, fmt.Errorf("pki dir: %w", err)
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return p, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "deskfarm-kubetest-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(30 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return p, fmt.Errorf("ca cert: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return p, err
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return p, err
	}
	ips := []net.IP{net.ParseIP("127.0.0.1")}
	if ip := net.ParseIP(host); ip != nil && !ip.Equal(ips[0]) {
		ips = append(ips, ip)
	}
	dns := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"}
	if net.ParseIP(host) == nil && host != "localhost" {
		dns = append(dns, host)
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(30 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: ips, DNSNames: dns,
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		return p, fmt.Errorf("serving cert: %w", err)
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return p, err
	}
	saPub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return p, err
	}
	p.token = randomHex(16)
	files := []struct {
		path string
		data []byte
	}{
		{p.caFile, pemBlock("CERTIFICATE", caDER)},
		{p.certFile, pemBlock("CERTIFICATE", srvDER)},
		{p.keyFile, ecKeyPEM(srvKey)},
		{p.saKeyFile, ecKeyPEM(saKey)},
		{p.saPubFile, pemBlock("PUBLIC KEY", saPub)},
		// token,user,uid,"group": system:masters passes every RBAC check.
		{p.tokenFile, []byte(p.token + ",kubetest-admin,kubetest-admin,system:masters\n")},
	}
	for _, f := range files {
		if err := os.WriteFile(f.path, f.data, 0o600); err != nil {
			return p, fmt.Errorf("pki: %w", err)
		}
	}
	return p, nil
}

// writeKubeconfig writes an admin kubeconfig for server.
func writeKubeconfig(path, server, caFile, token string) error {
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kubetest
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: admin
  user:
    token: %s
contexts:
- name: kubetest
  context:
    cluster: kubetest
    user: admin
current-context: kubetest
`, server, caFile, token)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	return nil
}

func ecKeyPEM(k *ecdsa.PrivateKey) []byte {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		panic(err) // only for curves the standard library does not know
	}
	return pemBlock("EC PRIVATE KEY", der)
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}
