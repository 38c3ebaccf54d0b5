//go:build !linux

package wire

import (
	"errors"
	"net"
)

// Without epoll every connection keeps a goroutine of its own: the
// poller is never made.

type pollFD struct{}

var errWouldBlock = errors.New("wire: would block")

func (*pollFD) read([]byte) (int, error)  { return 0, net.ErrClosed }
func (*pollFD) write([]byte) (int, error) { return 0, net.ErrClosed }

type poller struct{}

func newPoller(*Server) (*poller, error) { return nil, nil }
func (*poller) add(*conn) bool           { return false }
func (*poller) remove(*conn)             {}
func (*poller) stop()                    {}
