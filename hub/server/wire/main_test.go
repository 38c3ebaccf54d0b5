package wire_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/runnel-io/runnel/hub/server/wire"
	"go.uber.org/goleak"
)

// TestMain runs the tests with the poller serving the connections
// (Linux), then the same over TLS, then with a goroutine for each
// connection, and checks that no goroutine is left.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		fmt.Println("wire: again, over TLS")
		dir, err := os.MkdirTemp("", "wire-tls")
		if err == nil {
			err = wire.SetTLS(dir)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "TLS run:", err)
			os.Exit(1)
		}
		code = m.Run()
		os.RemoveAll(dir)
		wire.SetTLS("")
	}
	if code == 0 {
		fmt.Println("wire: again, a goroutine a connection")
		wire.SetGoroutinesOnly(true)
		code = m.Run()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
