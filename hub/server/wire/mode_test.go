package wire

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"testing"

	"github.com/runnel-io/runnel/internal/testcert"
)

// Every test runs three times (TestMain): with the poller serving the
// connections past their first stream, as on Linux by default; the same
// over TLS (the tests' servers and clients that do not set TLS
// themselves); and with a goroutine a connection.

var (
	goroutinesOnly bool
	serverTLS      *tls.Config // the TLS run's; nil in the others
	clientTLS      *tls.Config
)

// SetGoroutinesOnly switches the servers NewForTest makes.
func SetGoroutinesOnly(v bool) { goroutinesOnly = v }

// SetTLS switches the tests to TLS (certificates written in dir), or
// back to plaintext with dir "".
func SetTLS(dir string) error {
	if dir == "" {
		serverTLS, clientTLS = nil, nil
		return nil
	}
	ca, err := testcert.Write(dir)
	if err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(ca.Cert, ca.Key)
	if err != nil {
		return err
	}
	pem, err := os.ReadFile(ca.CA)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	serverTLS = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}}
	clientTLS = &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", NextProtos: []string{"h2"}}
	return nil
}

// ServerTLSForTest and ClientTLSForTest are the TLS run's configurations: nil
// in the others.
func ServerTLSForTest() *tls.Config { return serverTLS }
func ClientTLSForTest() *tls.Config { return clientTLS }

// NewForTest is New, without the poller in the goroutines' run.
func NewForTest(cfg Config) *Server {
	if goroutinesOnly {
		cfg.PollDelay = -1
	}
	return New(cfg)
}

// withTLS is cfg with the TLS run's TLS, unless cfg has its own.
func withTLS(cfg Config) Config {
	if cfg.TLS == nil {
		cfg.TLS = serverTLS
	}
	return cfg
}

// dialTest dials addr, over TLS in the TLS run.
func dialTest(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if clientTLS == nil {
		return c
	}
	tc := tls.Client(c, clientTLS)
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	return tc
}
