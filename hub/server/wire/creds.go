package wire

import (
	"context"
	"errors"
	"net"

	"google.golang.org/grpc/credentials"
)

// PassthroughCredentials are the transport credentials of the fallback's
// grpc.Server when the wire server serves TLS: a connection handed off
// has done its handshake here already, so they take it as it is and
// report its TLS state (a client certificate verified, its chains), as
// grpc-go's own TLS credentials would.
type PassthroughCredentials struct{}

var errNotHandedOff = errors.New("wire: passthrough credentials take only connections a wire server handed off over TLS")

// ServerHandshake returns c and its TLS state.
func (PassthroughCredentials) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	h, ok := c.(*handedConn)
	if !ok || h.tls == nil {
		return nil, nil, errNotHandedOff
	}
	return c, credentials.TLSInfo{State: h.tls.ConnectionState(),
		CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
}

// ClientHandshake is not for clients.
func (PassthroughCredentials) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errNotHandedOff
}

func (PassthroughCredentials) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls", SecurityVersion: "1.2"}
}

func (p PassthroughCredentials) Clone() credentials.TransportCredentials { return p }

func (PassthroughCredentials) OverrideServerName(string) error { return nil }
