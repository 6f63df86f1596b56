package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
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

// pki holds the files the API server and its clients share; everything lives under DIR/pki.
type pki struct {
	dir               string
	caCert            []byte // PEM
	servingCert       string // paths
	servingKey        string
	serviceAccountKey string
	serviceAccountPub string
	tokenFile         string
	adminToken        string
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

// newPKI makes a throw-away CA, a serving certificate for the loopback addresses (and host, when not
// loopback: the address pods reach the API server at) signed by it,
// the service-account signing key and a static token for the cluster-admin user.
func newPKI(dir, host string) (*pki, error) {
	p := &pki{dir: dir}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now().Add(-time.Hour)
	caTmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "testcluster-ca"},
		NotBefore: now, NotAfter: now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, _ := x509.ParseCertificate(caDER)
	p.caCert = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), p.caCert, 0o644); err != nil {
		return nil, err
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: now, NotAfter: now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")},
	}
	if ip := net.ParseIP(host); ip != nil && !ip.IsLoopback() {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	p.servingCert, p.servingKey = filepath.Join(dir, "apiserver.crt"), filepath.Join(dir, "apiserver.key")
	if err := writePEM(p.servingCert, "CERTIFICATE", der, 0o644); err != nil {
		return nil, err
	}
	keyDER, _ := x509.MarshalPKCS8PrivateKey(key)
	if err := writePEM(p.servingKey, "PRIVATE KEY", keyDER, 0o600); err != nil {
		return nil, err
	}

	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	p.serviceAccountKey, p.serviceAccountPub = filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")
	saDER, _ := x509.MarshalPKCS8PrivateKey(saKey)
	if err := writePEM(p.serviceAccountKey, "PRIVATE KEY", saDER, 0o600); err != nil {
		return nil, err
	}
	pubDER, _ := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err := writePEM(p.serviceAccountPub, "PUBLIC KEY", pubDER, 0o644); err != nil {
		return nil, err
	}

	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return nil, err
	}
	p.adminToken = hex.EncodeToString(tok)
	p.tokenFile = filepath.Join(dir, "tokens.csv")
	line := fmt.Sprintf("%s,admin,admin-uid,\"system:masters\"\n", p.adminToken)
	return p, os.WriteFile(p.tokenFile, []byte(line), 0o600)
}
