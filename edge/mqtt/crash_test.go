package mqtt

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runnel-io/runnel/internal/testbroker"
)

// The crash test re-runs this test binary as a child process that holds a
// source, then kills it with SIGKILL: no DISCONNECT, no Close, no deferred
// anything, as when an edge loses power.
const (
	crashEnvBroker = "RUNNEL_MQTT_CRASH_BROKER" // the broker URL; set only in the child
	crashEnvAck    = "RUNNEL_MQTT_CRASH_ACK"    // the child acks messages with seq below this
)

// crashChild is the child's main: it prints "ready" once subscribed and
// "got SEQ" for each message (after acking it, if it acks it), and runs
// until it is killed. It returns false in a normal test run.
func crashChild() bool {
	broker := os.Getenv(crashEnvBroker)
	if broker == "" {
		return false
	}
	ackBelow, _ := strconv.Atoi(os.Getenv(crashEnvAck))
	out := bufio.NewWriter(os.Stdout)
	lines := make(chan string, 1000)
	src, err := Start(context.Background(), Config{
		Brokers: []string{broker}, ClientID: "crash",
		Topics: []Subscription{{Filter: "sensors/#", QoS: 1}}, Logger: quietLogger(),
	}, Each(func(m Message, ack func()) {
		seq, _ := strconv.Atoi(string(m.Payload))
		if seq < ackBelow {
			ack()
		}
		lines <- fmt.Sprintf("got %d", seq)
	}))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	if err := src.WaitConnected(context.Background()); err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	fmt.Fprintln(out, "ready")
	out.Flush()
	for l := range lines {
		fmt.Fprintln(out, l)
		out.Flush()
	}
	return true
}

// A process that received messages and acknowledged only some is killed;
// a new source with the same ClientID gets every unacknowledged message
// again (Duplicate), then the later ones. Nothing is lost.
func TestCrashedProcessRedelivery(t *testing.T) {
	const n, acked, later = 100, 40, 10
	m := testbroker.Start(t)
	b := mosquittoUnderTest(m)

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	child := exec.CommandContext(t.Context(), exe, "-test.run=^$")
	child.Env = append(os.Environ(), crashEnvBroker+"="+b.url(), crashEnvAck+"="+strconv.Itoa(acked))
	child.Stderr = os.Stderr
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = child.Process.Kill()
			_ = child.Wait()
		}
	})
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	readLine := func() string {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("child exited")
			}
			if strings.HasPrefix(l, "error") {
				t.Fatalf("child: %s", l)
			}
			return l
		case <-time.After(20 * time.Second):
			t.Fatal("child silent for 20s")
			return ""
		}
	}
	if l := readLine(); l != "ready" {
		t.Fatalf("child said %q, want ready", l)
	}
	pub := testbroker.NewPublisher(t, b.hostPort)
	publishSeq(t, pub, "sensors/c", 0, n)
	for want := range n {
		if l := readLine(); l != fmt.Sprintf("got %d", want) {
			t.Fatalf("child: %q, want got %d", l, want)
		}
	}
	// Let Mosquitto read the child's last PUBACKs before the kill; if it
	// has not, it redelivers those too, which the checks below allow.
	time.Sleep(100 * time.Millisecond)
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed = true
	_ = child.Wait()
	for range lines { // the reader goroutine ends at EOF
	}

	src, ch := startSource(t, cfgFor(b, ProtocolV5, "crash"), n+later)
	publishSeq(t, pub, "sensors/c", n, n+later)
	last := -1
	for last < n+later-1 {
		g := next(t, ch)
		s := g.seq(t)
		switch {
		case s <= last:
			t.Fatalf("after the crash: seq %d after %d", s, last)
		case s > last+1 && s > acked:
			t.Fatalf("after the crash: seq %d after %d, lost %d", s, last, last+1)
		case s < n && !g.Duplicate:
			t.Fatalf("after the crash: seq %d was delivered before but Duplicate=false", s)
		case s >= n && g.Duplicate:
			t.Fatalf("after the crash: new seq %d has Duplicate=true", s)
		}
		if s < acked {
			t.Logf("seq %d redelivered although acked: the broker had not read the PUBACK before the crash", s)
		}
		last = s
		g.ack()
	}
	nothingWithin(t, ch, 200*time.Millisecond, "every message was received")
	closeSource(t, src)
	assertDrained(t, b, ProtocolV5, "crash")
}
