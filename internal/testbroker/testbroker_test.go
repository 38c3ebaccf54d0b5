package testbroker

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// subscriber is a plain paho client that collects payloads.
type subscriber struct {
	cli            *paho.Client
	sessionPresent bool
	mu             sync.Mutex
	got            []string
	arrived        chan struct{}
}

func subscribe(t *testing.T, m *Mosquitto, id string, clean bool, filter string) *subscriber {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := &subscriber{arrived: make(chan struct{}, 1000)}
	expiry := uint32(3600)
	cc := paho.ClientConfig{ClientID: id, OnPublishReceived: []func(paho.PublishReceived) (bool, error){
		func(pr paho.PublishReceived) (bool, error) {
			s.mu.Lock()
			s.got = append(s.got, string(pr.Packet.Payload))
			s.mu.Unlock()
			s.arrived <- struct{}{}
			return true, nil
		}}}
	cli, err := Dial(ctx, m.HostPort(), cc, &paho.Connect{ClientID: id, CleanStart: clean, KeepAlive: 30,
		Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}})
	if err != nil {
		t.Fatal(err)
	}
	s.cli = cli
	t.Cleanup(s.close)
	// Dial does not expose the CONNACK; a persistent session is visible
	// as messages arriving without a SUBSCRIBE, so subscribe only when
	// asked for a clean session.
	if filter != "" {
		if _, err := cli.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: 1}}}); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func (s *subscriber) close() {
	_ = s.cli.Disconnect(&paho.Disconnect{ReasonCode: 0})
	<-s.cli.Done()
}

func (s *subscriber) wait(t *testing.T, n int) []string {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for range n {
		select {
		case <-s.arrived:
		case <-timeout:
			s.mu.Lock()
			defer s.mu.Unlock()
			t.Fatalf("got %d of %d messages: %q", len(s.got), n, s.got)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.got...)
}

func TestPublishSubscribe(t *testing.T) {
	m := Start(t)
	if !strings.HasPrefix(m.Addr(), "mqtt://127.0.0.1:") {
		t.Fatalf("Addr() = %q", m.Addr())
	}
	sub := subscribe(t, m, "sub", true, "t/#")
	pub := NewPublisher(t, m.HostPort())
	for i := range 3 {
		pub.MustPublish("t/a", fmt.Appendf(nil, "m%d", i), 1)
	}
	got := sub.wait(t, 3)
	if strings.Join(got, ",") != "m0,m1,m2" {
		t.Fatalf("got %q, want m0,m1,m2 in order", got)
	}
}

// The point of Restart: a persistent session and its queued QoS 1 messages
// survive a broker restart, as they would in the field.
func TestRestartKeepsSessionAndQueue(t *testing.T) {
	m := Start(t)
	sub := subscribe(t, m, "durable", false, "q/#")
	sub.close()
	pub := NewPublisher(t, m.HostPort())
	for i := range 5 {
		pub.MustPublish("q/x", fmt.Appendf(nil, "m%d", i), 1)
	}
	pub.Close()
	m.Restart()
	if !m.Running() {
		t.Fatal("not running after Restart")
	}
	sub = subscribe(t, m, "durable", false, "") // no SUBSCRIBE: the session has it
	got := sub.wait(t, 5)
	if strings.Join(got, ",") != "m0,m1,m2,m3,m4" {
		t.Fatalf("after restart got %q, want m0..m4", got)
	}
}

// Kill saves nothing: without autosave the session is gone after restart.
func TestKillLosesUnsavedState(t *testing.T) {
	m := Start(t)
	sub := subscribe(t, m, "durable", false, "q/#")
	sub.close()
	NewPublisher(t, m.HostPort()).MustPublish("q/x", []byte("lost"), 1)
	m.Kill()
	if m.Running() {
		t.Fatal("running after Kill")
	}
	m.Restart() // starts a stopped broker
	sub = subscribe(t, m, "durable", false, "")
	select {
	case <-sub.arrived:
		t.Fatalf("message survived SIGKILL without autosave: %q", sub.got)
	case <-time.After(300 * time.Millisecond):
	}
}

func TestTLSListener(t *testing.T) {
	m := StartWith(t, Options{TLS: true})
	if !strings.HasPrefix(m.TLSAddr(), "mqtts://127.0.0.1:") || m.CAFile() == "" {
		t.Fatalf("TLSAddr() = %q, CAFile() = %q", m.TLSAddr(), m.CAFile())
	}
	pem, err := os.ReadFile(m.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	conn, err := tls.Dial("tcp", strings.TrimPrefix(m.TLSAddr(), "mqtts://"), &tls.Config{RootCAs: roots})
	if err != nil {
		t.Fatalf("TLS handshake verified by CAFile: %v", err)
	}
	conn.Close()
	if Start(t).TLSAddr() != "" {
		t.Fatal("TLSAddr without Options.TLS")
	}
}

func TestParseStatCPU(t *testing.T) {
	tests := []struct {
		stat string
		want time.Duration
	}{
		{"1234 (mosquitto) S 1 2 3 4 5 6 7 8 9 10 250 75 0 0 20 0 1 0", 3250 * time.Millisecond},
		{"1234 (a b) c) R 1 2 3 4 5 6 7 8 9 10 1 2 0", 30 * time.Millisecond},
		{"garbage", 0},
		{"1 (x) S 1 2", 0},
	}
	for _, tt := range tests {
		if got := parseStatCPU(tt.stat); got != tt.want {
			t.Errorf("parseStatCPU(%q) = %v, want %v", tt.stat, got, tt.want)
		}
	}
	m := Start(t)
	if m.CPUTime() < 0 {
		t.Fatal("negative CPU time")
	}
	m.Stop()
	if m.CPUTime() != 0 {
		t.Fatal("CPU time of a stopped broker")
	}
}

func TestConfig(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want []string
		not  []string
	}{
		{"defaults", Options{},
			[]string{"user root", "listener 1883 127.0.0.1", "allow_anonymous true", "persistence true",
				"persistence_location /d/", "pid_file /d/mosquitto.pid", "log_dest file /d/mosquitto.log",
				"max_queued_messages 0"},
			[]string{"max_inflight_messages", "autosave_interval"}},
		{"options", Options{MaxInflightMessages: 5, MaxQueuedMessages: 7, AutosaveInterval: 2 * time.Second, Extra: []string{"max_keepalive 60"}},
			[]string{"max_inflight_messages 5", "max_queued_messages 7", "autosave_interval 2", "max_keepalive 60"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &Mosquitto{opts: tt.opts, dir: "/d", port: 1883, log: "/d/mosquitto.log"}
			conf := m.config()
			lines := strings.Split(conf, "\n")
			for _, w := range tt.want {
				if !contains(lines, w) {
					t.Errorf("config lacks line %q:\n%s", w, conf)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(conf, n) {
					t.Errorf("config has %q:\n%s", n, conf)
				}
			}
		})
	}
}

func contains(lines []string, l string) bool {
	for _, x := range lines {
		if x == l {
			return true
		}
	}
	return false
}

// fatalTB records Fatalf and stops the goroutine, as testing.T does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// A missing binary must fail, not skip: CI must not go green by testing
// nothing.
func TestMissingBinaryFails(t *testing.T) {
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		StartWith(f, Options{Binary: "/nonexistent/mosquitto"})
	}()
	<-done
	if !strings.Contains(f.msg, "run deploy/test/install-deps.sh") {
		t.Fatalf("Fatalf message %q does not say how to install", f.msg)
	}
}
