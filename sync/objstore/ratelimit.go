package objstore

import (
	"context"
	"io"

	"golang.org/x/time/rate"
)

// burstFor is the token bucket's depth for a cap of limit bytes/s: a tenth
// of a second of traffic, within [4 KiB, 256 KiB] (and never more than the
// cap itself), so that a slow link sees a steady flow of small writes, not
// bursts, and a fast one few waits.
func burstFor(limit int64) int {
	return int(min(max(limit/10, 4<<10), 256<<10, limit))
}

// limited wraps an upload body in the Bucket's bandwidth cap (none: r).
func (b *Bucket) limited(ctx context.Context, r io.Reader) io.Reader {
	if b.bw == nil {
		return r
	}
	return &limitedReader{ctx: ctx, r: r, l: b.bw}
}

// limitedReader hands out its bytes no faster than its limiter allows. The
// limiter is shared by every upload of a Bucket, so concurrent uploads
// split the cap between them. Bytes are read first and waited for after,
// so the wait matches what was actually read.
type limitedReader struct {
	ctx context.Context
	r   io.Reader
	l   *rate.Limiter
}

func (lr *limitedReader) Read(p []byte) (int, error) {
	if b := lr.l.Burst(); len(p) > b {
		p = p[:b]
	}
	n, err := lr.r.Read(p)
	if n > 0 {
		if werr := lr.l.WaitN(lr.ctx, n); werr != nil {
			return n, werr
		}
	}
	return n, err
}
