// Package grpczstd registers zstd (klauspost/compress) as a gRPC
// compressor named "zstd". Importing it is enough on the receiving side;
// a sender opts in per call with grpc.UseCompressor(grpczstd.Name).
package grpczstd

import (
	"io"
	"sync"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/grpc/encoding"
)

// Name is the compressor's name in grpc-encoding headers.
const Name = "zstd"

func init() { encoding.RegisterCompressor(compressor{}) }

type compressor struct{}

func (compressor) Name() string { return Name }

// Encoders and decoders are pooled: each holds window buffers worth
// reusing across messages. Uplink batches are small (tens of KB), so the
// fastest level with a small window is the right trade on a gateway.
var encoders = sync.Pool{New: func() any {
	e, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(1<<20))
	return e
}}

var decoders = sync.Pool{New: func() any {
	d, _ := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderMaxMemory(64<<20), zstd.WithDecoderLowmem(true))
	return d
}}

func (compressor) Compress(w io.Writer) (io.WriteCloser, error) {
	e := encoders.Get().(*zstd.Encoder)
	e.Reset(w)
	return &writer{e}, nil
}

type writer struct{ *zstd.Encoder }

func (w *writer) Close() error {
	err := w.Encoder.Close()
	encoders.Put(w.Encoder)
	return err
}

func (compressor) Decompress(r io.Reader) (io.Reader, error) {
	d := decoders.Get().(*zstd.Decoder)
	if err := d.Reset(r); err != nil {
		decoders.Put(d)
		return nil, err
	}
	return &reader{d: d}, nil
}

// reader returns its decoder to the pool at EOF (gRPC reads every
// message to the end).
type reader struct{ d *zstd.Decoder }

func (r *reader) Read(p []byte) (int, error) {
	if r.d == nil {
		return 0, io.EOF
	}
	n, err := r.d.Read(p)
	if err == io.EOF {
		_ = r.d.Reset(nil)
		decoders.Put(r.d)
		r.d = nil
	}
	return n, err
}
