//go:build !linux

package wire

import (
	"net"
	"time"
)

// setUserTimeout does nothing here: the keepalive ping alone finds a
// silent peer.
func setUserTimeout(net.Conn, time.Duration) {}
