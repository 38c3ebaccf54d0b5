package objstore

// Network faults between a Bucket and versitygw, from a toxiproxy proxy:
// resets, latency, a thin link, a stalled one.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/runnel-io/runnel/internal/tests3"
)

// toxiBucket starts versitygw, a toxiproxy proxy in front of it, and a
// Bucket through the proxy.
func toxiBucket(t *testing.T, mutate func(*Config)) (*Bucket, *toxiproxy.Proxy, *tests3.Server) {
	t.Helper()
	srv := tests3.Start(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := l.Addr().String()
	l.Close()
	tp := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	proxy := toxiproxy.NewProxy(tp, "s3", listen, srv.HostPort())
	if err := proxy.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Stop)
	cfg := testConfig("http://"+listen, srv.AccessKey(), srv.SecretKey(), "s3://runnel-test/toxi")
	if mutate != nil {
		mutate(&cfg)
	}
	b, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, proxy, srv
}

func addToxic(t *testing.T, p *toxiproxy.Proxy, json string) {
	t.Helper()
	if _, err := p.Toxics.AddToxicJson(strings.NewReader(json)); err != nil {
		t.Fatalf("toxic %s: %v", json, err)
	}
}

// Connections reset at random: every operation gets through on a retry.
func TestToxiResets(t *testing.T) {
	b, proxy, _ := toxiBucket(t, func(c *Config) { c.Attempts = 12 })
	// Each new connection, one in two, is reset as soon as data flows.
	addToxic(t, proxy, `{"name":"rst","type":"reset_peer","stream":"downstream","toxicity":0.5,"attributes":{"timeout":0}}`)
	ctx := context.Background()
	big := randBytes(16, 11<<20)
	for i := range 8 {
		key := fmt.Sprintf("r/%d", i)
		// Fresh connections each time, so the toxic gets its chances.
		b.tr.CloseIdleConnections()
		if err := b.Put(ctx, key, strings.NewReader(key), int64(len(key))); err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
		if got := mustGet(t, b, key); string(got) != key {
			t.Fatalf("get %s: %q", key, got)
		}
	}
	if err := b.Put(ctx, "r/big", onlyReader{bytes.NewReader(big)}, -1); err != nil {
		t.Fatalf("multipart put: %v", err)
	}
	if err := b.PutFile(ctx, "r/file", writeFile(t, big)); err != nil {
		t.Fatalf("put-file: %v", err)
	}
	if keys, err := b.List(ctx, "r/"); err != nil || len(keys) != 10 {
		t.Fatalf("list: %q, %v", keys, err)
	}
	proxy.Toxics.ResetToxics(ctx)
	if got := mustGet(t, b, "r/big"); !bytes.Equal(got, big) {
		t.Fatal("r/big differs")
	}
	if b.Stats().Retries == 0 {
		t.Fatal("no retries: the toxic did nothing?")
	}
	t.Logf("retries: %d", b.Stats().Retries)
}

// Latency slows every request but breaks none.
func TestToxiLatency(t *testing.T) {
	b, proxy, _ := toxiBucket(t, nil)
	addToxic(t, proxy, `{"name":"lat","type":"latency","stream":"downstream","attributes":{"latency":150,"jitter":50}}`)
	start := time.Now()
	ctx := context.Background()
	if err := b.Put(ctx, "slow", strings.NewReader("x"), 1); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, b, "slow"); string(got) != "x" {
		t.Fatalf("get: %q", got)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Fatalf("two requests took %v through 150 ms of latency", d)
	}
	if b.Stats().Retries != 0 {
		t.Fatalf("retries through latency alone: %+v", b.Stats())
	}
}

// A thin link and a ctx deadline: PutFile stops at the deadline, keeps its
// upload, and the next PutFile on a good link resumes it.
func TestToxiBandwidthDeadline(t *testing.T) {
	b, proxy, _ := toxiBucket(t, func(c *Config) { c.Concurrency = 1 })
	data := randBytes(17, 3*MinPartSize)
	path := writeFile(t, data)
	// 2 MiB/s: the first part takes 2.5 s.
	addToxic(t, proxy, `{"name":"thin","type":"bandwidth","stream":"upstream","attributes":{"rate":2048}}`)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	err := b.PutFile(ctx, "thin", path)
	var e *Error
	if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &e) || e.Cause != CauseCanceled {
		t.Fatalf("PutFile past its deadline: %v", err)
	}
	if ups, _ := b.listUploads(context.Background(), "test", "toxi/thin"); len(ups) != 1 {
		t.Fatalf("uploads kept: %v", ups)
	}
	proxy.Toxics.ResetToxics(context.Background())
	if err := b.PutFile(context.Background(), "thin", path); err != nil {
		t.Fatal(err)
	}
	if b.Stats().ResumedParts < 1 {
		t.Fatalf("nothing resumed: %+v", b.Stats())
	}
	if got := mustGet(t, b, "thin"); !bytes.Equal(got, data) {
		t.Fatal("object differs")
	}
}

// A link that drops every byte from the server for 1.5 s (toxiproxy's
// timeout toxic; versitygw hangs up on the requests it cannot answer):
// retried until the link is back. TestIdleTimeout covers a server that
// holds the connection open without answering.
func TestToxiStall(t *testing.T) {
	b, proxy, _ := toxiBucket(t, func(c *Config) { c.IdleTimeout, c.Attempts = 400*time.Millisecond, 20 })
	addToxic(t, proxy, `{"name":"stall","type":"timeout","stream":"downstream","attributes":{"timeout":0}}`)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- b.Put(context.Background(), "stalled", strings.NewReader("x"), 1) }()
	time.Sleep(1500 * time.Millisecond)
	proxy.Toxics.ResetToxics(context.Background())
	if err := <-done; err != nil {
		t.Fatalf("put across a stall: %v", err)
	}
	if b.Stats().Retries == 0 {
		t.Fatal("no retry: did the stall happen?")
	}
	t.Logf("a 1.5 s stall cost %v, %d retries", time.Since(start), b.Stats().Retries)
}
