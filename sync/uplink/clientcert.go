package uplink

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc/credentials"
)

// certPeek bounds how long a connection that presents a client
// certificate waits, after the TLS handshake, for the hub's first bytes.
const certPeek = 5 * time.Second

// certCreds wraps the TLS credentials of an uplink that presents a client
// certificate. Under TLS 1.3 the client's handshake completes before the
// hub has checked the certificate: a hub that refuses it sends an alert
// and closes, and the client's first write then fails with a broken pipe
// that says nothing. So after the handshake the uplink waits (at most
// certPeek) for the hub's first bytes, which a gRPC server sends at once
// (its HTTP/2 settings), and turns an alert into a handshake error that
// says the hub refused the certificate. The bytes read are given to gRPC
// first. With nothing in time the connection goes on as it is.
type certCreds struct {
	credentials.TransportCredentials
}

func (c certCreds) Clone() credentials.TransportCredentials {
	return certCreds{c.TransportCredentials.Clone()}
}

func (c certCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, raw)
	if err != nil {
		return nil, nil, certRefused(err)
	}
	ti, ok := info.(credentials.TLSInfo)
	if !ok || ti.State.Version != tls.VersionTLS13 {
		return conn, info, nil // TLS 1.2 checks the certificate within the handshake
	}
	deadline := time.Now().Add(certPeek)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	conn.SetReadDeadline(deadline)
	buf := make([]byte, 4096)
	n, err := conn.Read(buf)
	conn.SetReadDeadline(time.Time{})
	var ne net.Error
	switch {
	case err == nil, n > 0:
	case errors.As(err, &ne) && ne.Timeout():
		return conn, info, nil
	default:
		conn.Close()
		return nil, nil, certRefused(err)
	}
	return &peekedConn{Conn: conn, buf: buf[:n]}, info, nil
}

// certRefused names the client certificate in an error that is the hub's
// TLS alert about it.
func certRefused(err error) error {
	if s := err.Error(); strings.Contains(s, "remote error: tls:") && (strings.Contains(s, "certificate") || strings.Contains(s, "unknown")) {
		return fmt.Errorf("the hub refused this edge's TLS client certificate (uplink.tls.cert_file: another CA's than the hub's tls.client_ca_file, expired, or not for client authentication): %w", err)
	}
	return err
}

// peekedConn gives the bytes read after the handshake before reading on.
type peekedConn struct {
	net.Conn
	buf []byte
}

func (p *peekedConn) Read(b []byte) (int, error) {
	if len(p.buf) > 0 {
		n := copy(b, p.buf)
		p.buf = p.buf[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}

// SyscallConn passes on the underlying connection's, which gRPC uses
// for socket options (TCP_USER_TIMEOUT).
func (p *peekedConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := p.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.New("uplink: no syscall connection")
}

// hasClientCert reports whether c presents a client certificate.
func hasClientCert(c *tls.Config) bool {
	return c != nil && (len(c.Certificates) > 0 || c.GetClientCertificate != nil)
}
