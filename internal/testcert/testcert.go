// Package testcert writes a throwaway CA and a server certificate for
// 127.0.0.1 and localhost signed by it, for tests that run real servers
// over TLS (internal/testbroker's Mosquitto, internal/tests3's versitygw),
// and client certificates signed by the same CA (WriteClient: an edge's
// certificate for the hub's tls.client_ca_file). The certificates are
// valid from an hour ago for a day unless a client's says otherwise.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
)

// Files are the PEM files of a throwaway CA (its certificate and key) and
// a server certificate for 127.0.0.1 that it signed.
type Files struct {
	CA, CAKey, Cert, Key string
}

// Write creates a CA (ca.pem, ca.key) and a server certificate valid for
// 127.0.0.1 and "localhost" (server.pem, server.key) in dir.
func Write(dir string) (Files, error) {
	f := Files{
		CA:    filepath.Join(dir, "ca.pem"),
		CAKey: filepath.Join(dir, "ca.key"),
		Cert:  filepath.Join(dir, "server.pem"),
		Key:   filepath.Join(dir, "server.key"),
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return f, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "runnel test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return f, err
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return f, err
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:     []string{"localhost"},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caTmpl, &srvKey.PublicKey, caKey)
	if err != nil {
		return f, err
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		return f, err
	}
	caKeyDER, err := x509.MarshalECPrivateKey(caKey)
	if err != nil {
		return f, err
	}
	return f, writePEM([]pemFile{{f.CA, "CERTIFICATE", caDER}, {f.CAKey, "EC PRIVATE KEY", caKeyDER},
		{f.Cert, "CERTIFICATE", srvDER}, {f.Key, "EC PRIVATE KEY", keyDER}})
}

type pemFile struct {
	path, typ string
	der       []byte
}

func writePEM(files []pemFile) error {
	for _, w := range files {
		b := pem.EncodeToMemory(&pem.Block{Type: w.typ, Bytes: w.der})
		if err := os.WriteFile(w.path, b, 0o600); err != nil {
			return fmt.Errorf("write %s: %w", w.path, err)
		}
	}
	return nil
}

// Client is a client certificate to write (WriteClient). Zero NotBefore
// and NotAfter are an hour ago and a day from now.
type Client struct {
	CommonName          string
	NotBefore, NotAfter time.Time
	// ExtKeyUsage defaults to client authentication.
	ExtKeyUsage []x509.ExtKeyUsage
}

// serial numbers client certificates apart (the CA is 1, the server 2).
var serial atomic.Int64

// WriteClient writes a client certificate signed by the CA of ca (Write's
// files) as name.pem and name.key in dir, and returns their paths.
func WriteClient(ca Files, dir, name string, c Client) (certFile, keyFile string, err error) {
	pair, err := tls.LoadX509KeyPair(ca.CA, ca.CAKey)
	if err != nil {
		return "", "", fmt.Errorf("testcert: the CA: %w", err)
	}
	now := time.Now()
	if c.NotBefore.IsZero() {
		c.NotBefore = now.Add(-time.Hour)
	}
	if c.NotAfter.IsZero() {
		c.NotAfter = now.Add(24 * time.Hour)
	}
	if c.ExtKeyUsage == nil {
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(100 + serial.Add(1)),
		Subject:      pkix.Name{CommonName: c.CommonName},
		NotBefore:    c.NotBefore,
		NotAfter:     c.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  c.ExtKeyUsage,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, pair.Leaf, &key.PublicKey, pair.PrivateKey)
	if err != nil {
		return "", "", err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key")
	return certFile, keyFile, writePEM([]pemFile{{certFile, "CERTIFICATE", der}, {keyFile, "EC PRIVATE KEY", keyDER}})
}
