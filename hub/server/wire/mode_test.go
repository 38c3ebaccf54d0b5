package wire

// Every test runs twice (TestMain): with the poller serving plaintext
// connections, as on Linux by default, and with a goroutine a connection.

// goroutinesOnly is the second run's.
var goroutinesOnly bool

// SetGoroutinesOnly switches the servers NewForTest makes.
func SetGoroutinesOnly(v bool) { goroutinesOnly = v }

// NewForTest is New, without the poller in the second run.
func NewForTest(cfg Config) *Server {
	if goroutinesOnly {
		cfg.PollDelay = -1
	}
	return New(cfg)
}
