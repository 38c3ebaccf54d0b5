package settings

import (
	"errors"
	"fmt"
	"math"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Rules for single values, shared by the tables. A rule's error says what
// is wrong with the value, never which setting it belongs to.

// NonEmpty refuses the empty string.
func NonEmpty(s string) error {
	if s == "" {
		return errors.New("empty")
	}
	return nil
}

// OrEmpty is check, except that the empty string (off, none) is allowed.
func OrEmpty(check func(string) error) func(string) error {
	return func(s string) error {
		if s == "" {
			return nil
		}
		return check(s)
	}
}

// PathOrGlob checks a file path or a glob, as the pipelines settings take.
// Whether a plain path exists is checked with the other files
// (Checker.SpecFiles).
func PathOrGlob(s string) error {
	if strings.TrimSpace(s) == "" {
		return errors.New("empty path")
	}
	if _, err := filepath.Match(s, ""); err != nil {
		return fmt.Errorf("%q is not a valid glob: %v", s, err)
	}
	return nil
}

// ListenAddr checks a listen address, host:port. The host may be empty
// (all interfaces); the port must be a number (0: any free port). example
// is shown when the address is empty.
func ListenAddr(example string) func(string) error {
	return func(s string) error {
		if s == "" {
			return fmt.Errorf("empty; expected host:port such as %s", example)
		}
		_, port, err := net.SplitHostPort(s)
		if err != nil {
			var ae *net.AddrError
			if errors.As(err, &ae) {
				return fmt.Errorf("%q is not host:port: %s", s, ae.Err)
			}
			return fmt.Errorf("%q is not host:port", s)
		}
		if err := CheckPort(port); err != nil {
			return fmt.Errorf("%q: %v", s, err)
		}
		return nil
	}
}

// CheckPort checks a TCP port number, 0 to 65535.
func CheckPort(p string) error {
	n, err := strconv.Atoi(p)
	if err != nil || n < 0 || n > math.MaxUint16 {
		return fmt.Errorf("port %q is not a number from 0 to 65535", p)
	}
	return nil
}

// IsLoopbackAddr reports whether a listen address, host:port, only
// accepts connections from the host itself: its host is localhost or an IP
// in 127.0.0.0/8 or ::1. An empty host (all interfaces), 0.0.0.0, ::, a
// LAN address or any other name is not: a listener without authentication
// there is open to the network.
func IsLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// SameListenAddr reports whether two listen addresses would collide: the
// same port (not 0) on the same host, or on a wildcard host.
func SameListenAddr(a, b string) bool {
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil || pa != pb || pa == "0" {
		return false
	}
	wild := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return ha == hb || wild(ha) || wild(hb)
}

// Positive refuses a zero duration.
func Positive(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("must be greater than 0, got %s", ShowDuration(d))
	}
	return nil
}

// Between refuses a duration outside lo..hi.
func Between(lo, hi time.Duration) func(time.Duration) error {
	return func(d time.Duration) error {
		if d < lo || d > hi {
			return fmt.Errorf("%s is out of range; must be %s to %s", ShowDuration(d), ShowDuration(lo), ShowDuration(hi))
		}
		return nil
	}
}
