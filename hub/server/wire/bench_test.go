package wire

import (
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"google.golang.org/grpc"
)

// BenchmarkIdleStreams holds 2,000 connections, each with one open stream
// that has had one message and its answer, served here (server=wire) or
// handed to grpc-go (server=grpc-go), and reports what one costs the
// process once idle: heap and stacks in use after a collection, per
// connection, and goroutines per connection. The clients are raw
// sockets that wrote their frames and read nothing more (a few hundred
// bytes of theirs are in the figure). Run with -benchtime 1x.
func BenchmarkIdleStreams(b *testing.B) {
	const n = 2000
	for _, srv := range []string{"wire", "grpc-go"} {
		b.Run("server="+srv, func(b *testing.B) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			s := New(Config{})
			s.Handle(testMethod, &checkHandler{t: b})
			// grpc-go takes a method of its own, held as the hub's
			// control stream is: a handler waiting in RecvMsg.
			g := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
				var m []byte
				for {
					if err := ss.RecvMsg(&m); err != nil {
						return err
					}
				}
			}), grpc.InitialWindowSize(int32(s.cfg.StreamWindow)), grpc.InitialConnWindowSize(int32(s.cfg.ConnWindow)),
				grpc.HeaderTableSize(0), grpc.WriteBufferSize(8<<10))
			done := make(chan struct{}, 2)
			go func() { s.Serve(lis); done <- struct{}{} }()
			go func() { g.Serve(s.Fallback()); done <- struct{}{} }()
			method := testMethod
			if srv == "grpc-go" {
				method = "/other.Service/Hold"
			}
			first := append([]byte(clientPreface), appendSettings(nil)...)
			first = append(first, requestHeadersFor(1, method)...)
			first = append(first, message(1, []byte("hello"), false)...)
			for b.Loop() {
				conns := make([]net.Conn, 0, n)
				var before runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				g0 := runtime.NumGoroutine()
				for range n {
					c, err := net.Dial("tcp", lis.Addr().String())
					if err != nil {
						b.Fatal(err)
					}
					c.Write(first)
					conns = append(conns, c)
				}
				// Until every stream is open and idle.
				deadline := time.Now().Add(30 * time.Second)
				for s.Stats().Streams+int(s.Stats().HandedOff) < n && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				time.Sleep(500 * time.Millisecond)
				var after runtime.MemStats
				for range 3 { // stacks shrink at collections
					runtime.GC()
				}
				runtime.ReadMemStats(&after)
				per := func(a, b uint64) float64 { return (float64(a) - float64(b)) / n }
				b.ReportMetric(per(after.HeapInuse+after.StackInuse, before.HeapInuse+before.StackInuse), "bytes/conn")
				b.ReportMetric(per(after.StackInuse, before.StackInuse), "stack-bytes/conn")
				b.ReportMetric(float64(runtime.NumGoroutine()-g0)/n, "goroutines/conn")
				for _, c := range conns {
					c.Close()
				}
			}
			s.Shutdown(b.Context(), nil)
			g.Stop()
			<-done
			<-done
		})
	}
}

// requestHeadersFor is requestHeaders of another method.
func requestHeadersFor(stream uint32, method string) []byte {
	return appendHeaders(nil, stream, encodeBlock(":method", "POST", ":scheme", "http", ":path", method,
		":authority", "x", "content-type", "application/grpc", "te", "trailers"), false, maxFrameSize)
}

var _ = io.Discard
