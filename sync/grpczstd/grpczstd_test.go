package grpczstd_test

import (
	"bytes"
	"io"
	"math/rand/v2"
	"testing"

	"google.golang.org/grpc/encoding"

	"github.com/runnel-io/runnel/sync/grpczstd"
)

// TestRoundTrip: what the registered compressor writes it reads back,
// many times over (the pools hand out reused encoders and decoders), and
// repetitive data shrinks.
func TestRoundTrip(t *testing.T) {
	c := encoding.GetCompressor(grpczstd.Name)
	if c == nil {
		t.Fatal("zstd compressor not registered")
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 50 {
		msg := make([]byte, r.IntN(1<<16))
		for j := range msg {
			msg[j] = "sensor-temperature"[(j+r.IntN(2))%18] // compressible
		}
		var buf bytes.Buffer
		w, err := c.Compress(&buf)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(msg)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if len(msg) > 1024 && buf.Len() >= len(msg) {
			t.Errorf("message %d: %d bytes compressed to %d", i, len(msg), buf.Len())
		}
		rd, err := c.Decompress(&buf)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rd)
		if err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("message %d: round trip failed (err %v, %d of %d bytes)", i, err, len(got), len(msg))
		}
	}
	if _, err := c.Decompress(bytes.NewReader([]byte("not zstd"))); err == nil {
		rd, _ := c.Decompress(bytes.NewReader([]byte("not zstd")))
		if _, err := io.ReadAll(rd); err == nil {
			t.Error("garbage decompressed without an error")
		}
	}
}
