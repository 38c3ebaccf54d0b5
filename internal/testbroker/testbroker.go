package testbroker

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runnel-io/runnel/internal/testcert"
	"github.com/runnel-io/runnel/internal/testproc"
)

// Options configure a broker beyond the defaults. The zero value is the
// configuration described in the package comment.
type Options struct {
	// MaxInflightMessages is max_inflight_messages: how many QoS 1/2
	// messages Mosquitto has in flight to one MQTT v3 client. 0 keeps
	// Mosquitto's default (20). For MQTT v5 clients the client's Receive
	// Maximum (CONNECT property) is the bound instead.
	MaxInflightMessages int
	// MaxQueuedMessages is max_queued_messages: QoS 1/2 messages queued per
	// client beyond those in flight. 0 means no limit (Mosquitto's default
	// is 1000, beyond which it drops messages).
	MaxQueuedMessages int
	// AutosaveInterval is autosave_interval, in whole seconds: how often
	// Mosquitto writes its database while running, which bounds what Kill
	// loses. 0 keeps Mosquitto's default (1800 s); Stop always saves.
	AutosaveInterval time.Duration
	// StartTimeout bounds how long Start and Restart wait for the broker to
	// accept connections. Default 10s.
	StartTimeout time.Duration
	// Extra lines are appended to mosquitto.conf verbatim.
	Extra []string
	// TLS adds a second listener, on its own free loopback port, that
	// speaks MQTT over TLS with a certificate for 127.0.0.1 signed by a
	// throwaway CA (see TLSAddr and CAFile).
	TLS bool
	// Binary is the mosquitto executable. Default: "mosquitto" on $PATH,
	// then /usr/sbin/mosquitto (Debian installs it there, outside a
	// non-root user's $PATH).
	Binary string
}

// Mosquitto is one running (or stopped) broker owned by a test.
type Mosquitto struct {
	t       testing.TB
	opts    Options
	bin     string
	dir     string
	port    int
	tls     testcert.Files // set when Options.TLS
	tlsPort int
	conf    string
	log     string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited; nil when never started
	err  error         // cmd.Wait's result, valid after done is closed
}

// Start launches Mosquitto with default [Options]; see [StartWith].
func Start(t testing.TB) *Mosquitto {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith launches Mosquitto on a free 127.0.0.1 port and returns once it
// accepts connections. The broker is stopped when the test ends.
func StartWith(t testing.TB, opts Options) *Mosquitto {
	t.Helper()
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 10 * time.Second
	}
	bin, err := findBinary(opts.Binary)
	if err != nil {
		t.Fatalf("testbroker: %v: run deploy/test/install-deps.sh", err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatalf("testbroker: find a free port: %v", err)
	}
	dir := t.TempDir()
	m := &Mosquitto{
		t:    t,
		opts: opts,
		bin:  bin,
		dir:  dir,
		port: port,
		conf: filepath.Join(dir, "mosquitto.conf"),
		log:  filepath.Join(dir, "mosquitto.log"),
	}
	if opts.TLS {
		if m.tls, err = testcert.Write(dir); err != nil {
			t.Fatalf("testbroker: TLS files: %v", err)
		}
		if m.tlsPort, err = freePort(); err != nil {
			t.Fatalf("testbroker: find a free port: %v", err)
		}
	}
	if err := os.WriteFile(m.conf, []byte(m.config()), 0o644); err != nil {
		t.Fatalf("testbroker: write %s: %v", m.conf, err)
	}
	t.Cleanup(func() {
		m.stop(syscall.SIGTERM)
		if t.Failed() {
			m.dumpLog()
		}
	})
	m.start()
	return m
}

// Addr is the broker's URL, "mqtt://127.0.0.1:PORT".
func (m *Mosquitto) Addr() string { return "mqtt://" + m.HostPort() }

// HostPort is "127.0.0.1:PORT", for clients that want an address.
func (m *Mosquitto) HostPort() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(m.port)) }

// TLSAddr is the TLS listener's URL, "mqtts://127.0.0.1:PORT"; "" unless
// Options.TLS.
func (m *Mosquitto) TLSAddr() string {
	if m.tlsPort == 0 {
		return ""
	}
	return "mqtts://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(m.tlsPort))
}

// CAFile is the PEM file of the CA that signed the TLS listener's
// certificate; "" unless Options.TLS.
func (m *Mosquitto) CAFile() string { return m.tls.CA }

// Dir is the broker's directory: mosquitto.conf, mosquitto.log,
// mosquitto.pid and the persistence database mosquitto.db.
func (m *Mosquitto) Dir() string { return m.dir }

// Running reports whether the broker process is alive.
func (m *Mosquitto) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.running()
}

// Stop stops the broker with SIGTERM and waits for it to exit; Mosquitto
// saves its database first. Stopping a stopped broker does nothing.
func (m *Mosquitto) Stop() {
	m.t.Helper()
	if err := m.stop(syscall.SIGTERM); err != nil {
		m.t.Fatalf("testbroker: stop: %v", err)
	}
}

// Kill stops the broker with SIGKILL: like a power cut, it saves nothing.
func (m *Mosquitto) Kill() {
	m.t.Helper()
	if err := m.stop(syscall.SIGKILL); err != nil {
		m.t.Fatalf("testbroker: kill: %v", err)
	}
}

// Restart stops the broker if it is running (saving its database) and
// starts it again on the same port with the same database, returning once
// it accepts connections.
func (m *Mosquitto) Restart() {
	m.t.Helper()
	m.Stop()
	m.start()
}

// CPUTime is the CPU time (user + system) the running broker process has
// used, read from /proc; benchmarks divide it by messages, because on a
// small machine the broker's CPU, not the network, is the bottleneck. It is
// 0 where /proc is missing or the broker is not running.
func (m *Mosquitto) CPUTime() time.Duration {
	m.mu.Lock()
	running, cmd := m.running(), m.cmd
	m.mu.Unlock()
	if !running {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
	if err != nil {
		return 0
	}
	return parseStatCPU(string(b))
}

// parseStatCPU reads utime and stime (fields 14 and 15, in clock ticks of
// 1/100 s on Linux) from a /proc/PID/stat line. The command name (field 2)
// may contain spaces, so fields are counted after its closing parenthesis.
func parseStatCPU(stat string) time.Duration {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(stat[i+1:]) // f[0] is field 3
	if len(f) < 13 {
		return 0
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	const tick = 10 * time.Millisecond // USER_HZ is 100 on every Linux Go supports
	return time.Duration(utime+stime) * tick
}

// Log returns what the broker has logged so far.
func (m *Mosquitto) Log() string {
	b, _ := os.ReadFile(m.log)
	return string(b)
}

func (m *Mosquitto) config() string {
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	line("# written by internal/testbroker")
	line("user root")
	line("listener %d 127.0.0.1", m.port)
	line("allow_anonymous true")
	line("persistence true")
	line("persistence_location %s%c", m.dir, filepath.Separator)
	line("persistence_file mosquitto.db")
	line("pid_file %s", filepath.Join(m.dir, "mosquitto.pid"))
	line("log_dest file %s", m.log)
	line("log_type error")
	line("log_type warning")
	line("log_type notice")
	line("log_type information")
	line("log_timestamp_format %%Y-%%m-%%dT%%H:%%M:%%S")
	line("connection_messages true")
	line("max_queued_messages %d", m.opts.MaxQueuedMessages)
	if m.opts.MaxInflightMessages > 0 {
		line("max_inflight_messages %d", m.opts.MaxInflightMessages)
	}
	if s := int(m.opts.AutosaveInterval / time.Second); s > 0 {
		line("autosave_interval %d", s)
	}
	for _, l := range m.opts.Extra {
		line("%s", l)
	}
	if m.tlsPort != 0 {
		// Last: in mosquitto.conf, cafile/certfile/keyfile belong to the
		// listener above them.
		line("listener %d 127.0.0.1", m.tlsPort)
		line("cafile %s", m.tls.CA)
		line("certfile %s", m.tls.Cert)
		line("keyfile %s", m.tls.Key)
	}
	return b.String()
}

// start launches the process and waits until it accepts connections.
func (m *Mosquitto) start() {
	m.t.Helper()
	m.mu.Lock()
	if m.running() {
		m.mu.Unlock()
		return
	}
	cmd := exec.Command(m.bin, "-c", m.conf)
	testproc.DieWithParent(cmd)
	// Mosquitto logs to its file; anything on stdout/stderr comes before
	// the log file is open (config errors) and is kept for the failure.
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		m.mu.Unlock()
		m.t.Fatalf("testbroker: start %s: %v", m.bin, err)
	}
	done := make(chan struct{})
	m.cmd, m.done, m.err = cmd, done, nil
	go func() {
		err := cmd.Wait()
		m.mu.Lock()
		m.err = err
		m.mu.Unlock()
		close(done)
	}()
	m.mu.Unlock()

	deadline := time.Now().Add(m.opts.StartTimeout)
	for {
		c, err := net.DialTimeout("tcp", m.HostPort(), 200*time.Millisecond)
		if err == nil {
			_ = c.Close()
			return
		}
		select {
		case <-done:
			m.t.Fatalf("testbroker: mosquitto exited at start (%v); output:\n%s\nlog:\n%s", m.exitErr(), out.String(), m.Log())
		default:
		}
		if time.Now().After(deadline) {
			_ = m.stop(syscall.SIGKILL)
			m.t.Fatalf("testbroker: mosquitto not accepting on %s after %v; log:\n%s", m.HostPort(), m.opts.StartTimeout, m.Log())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop signals the process and waits for it; it escalates to SIGKILL when
// a SIGTERM is not obeyed within 10s.
func (m *Mosquitto) stop(sig syscall.Signal) error {
	m.mu.Lock()
	if !m.running() {
		m.mu.Unlock()
		return nil
	}
	cmd, done := m.cmd, m.done
	m.mu.Unlock()

	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %v to pid %d: %w", sig, cmd.Process.Pid, err)
	}
	select {
	case <-done:
		return nil
	case <-time.After(10 * time.Second):
	}
	_ = cmd.Process.Kill()
	<-done
	return fmt.Errorf("pid %d ignored %v for 10s; killed", cmd.Process.Pid, sig)
}

// running reports whether the process is alive; m.mu must be held.
func (m *Mosquitto) running() bool {
	if m.done == nil {
		return false
	}
	select {
	case <-m.done:
		return false
	default:
		return true
	}
}

func (m *Mosquitto) exitErr() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

func (m *Mosquitto) dumpLog() {
	m.t.Logf("testbroker: mosquitto on %s, log %s:\n%s", m.HostPort(), m.log, m.Log())
}

func findBinary(name string) (string, error) {
	if name != "" {
		p, err := exec.LookPath(name)
		if err != nil {
			return "", fmt.Errorf("mosquitto binary %q: %w", name, err)
		}
		return p, nil
	}
	if p, err := exec.LookPath("mosquitto"); err == nil {
		return p, nil
	}
	const debian = "/usr/sbin/mosquitto"
	if st, err := os.Stat(debian); err == nil && st.Mode()&0o111 != 0 {
		return debian, nil
	}
	return "", errors.New("mosquitto binary not found on $PATH or at /usr/sbin/mosquitto")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
