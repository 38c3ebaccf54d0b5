package objstore

import (
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"golang.org/x/sync/errgroup"
)

// PutFile stores the file at path under key, never overwriting, like Put,
// and survives crashes: a file larger than PartSize goes up in a multipart
// upload that a later PutFile of the same key resumes. It looks for an
// incomplete upload of the key, keeps each uploaded part whose size and
// ETag (the part's MD5) match the file's bytes at that place, uploads the
// rest (Concurrency parts at once) and completes with If-None-Match: *.
// Other incomplete uploads of the key are aborted, and so is the upload
// when PutFile gives up for good (ErrExists, ErrRefused); after a
// retryable failure or a canceled ctx it is left for the next PutFile.
//
// If the key already holds exactly this file's bytes — a crash after the
// upload completed, before its caller knew — PutFile returns nil: the
// object is compared by its ETag, which for a multipart object is the MD5
// of the parts' MD5s (so with the same PartSize). Otherwise an existing key
// is ErrExists.
//
// The file must not change while PutFile runs; between runs it may (the
// parts that no longer match are uploaded again).
func (b *Bucket) PutFile(ctx context.Context, key, path string) (err error) {
	const op = "put-file"
	defer b.count(&err)
	full, err := b.fullKey(op, key)
	if err != nil {
		return err
	}
	local := func(err error) error {
		return &Error{Op: op, Bucket: b.bucket, Key: full, Cause: CauseOther, Err: err}
	}
	f, err := os.Open(path)
	if err != nil {
		return local(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return local(err)
	}
	if !fi.Mode().IsRegular() {
		return local(fmt.Errorf("%s: not a regular file", path))
	}
	size := fi.Size()
	pend := b.st.begin(b.cfg.Clock.Now(), size)
	defer pend.done()

	ps := partSizeFor(size, b.cfg.PartSize)
	if size <= ps {
		sum, err := md5Of(f, 0, size)
		if err != nil {
			return local(fmt.Errorf("read %s: %w", path, err))
		}
		return b.putOnce(ctx, op, full, f, size, sum, true)
	}
	lay := layout{size: size, ps: ps, f: f}

	// A crash after the upload completed left the object itself.
	var info minio.ObjectInfo
	err = b.retry(ctx, op, full, func(ctx context.Context) (err error) {
		info, err = b.core.StatObject(ctx, b.bucket, full, minio.StatObjectOptions{})
		return err
	})
	switch {
	case err == nil:
		uploads, lerr := b.listUploads(ctx, op, full)
		if lerr == nil {
			for _, u := range uploads {
				b.abort(ctx, full, u.UploadID, "the object exists")
			}
		}
		want, serr := lay.etag()
		if serr != nil {
			return local(fmt.Errorf("read %s: %w", path, serr))
		}
		if strings.Trim(info.ETag, `"`) == want {
			b.log.Info("objstore: already uploaded", "key", full)
			return nil
		}
		return &Error{Op: op, Bucket: b.bucket, Key: full, Cause: CauseExists, Code: "PreconditionFailed", Attempts: 1}
	case !errors.Is(err, ErrNotFound):
		return err
	}

	up, err := b.resumable(ctx, op, full, &lay)
	if err != nil {
		return err
	}
	if up != nil {
		var have int64
		for n := range up.done {
			have += lay.partLen(n)
		}
		pend.sent(have)
	}
	return b.putMultipart(ctx, op, full, &fileParts{lay: &lay, skip: up.doneSet()}, up, true, pend)
}

// layout is how a file of size bytes splits into parts of ps bytes.
type layout struct {
	size, ps int64
	f        io.ReaderAt
	mu       sync.Mutex
	sums     map[int][md5.Size]byte // computed part MD5s
}

func (l *layout) parts() int { return int((l.size + l.ps - 1) / l.ps) }

func (l *layout) partLen(n int) int64 { return min(l.ps, l.size-int64(n-1)*l.ps) }

// sum is the MD5 of part n (1-based), read from the file once.
func (l *layout) sum(n int) ([md5.Size]byte, error) {
	l.mu.Lock()
	s, ok := l.sums[n]
	l.mu.Unlock()
	if ok {
		return s, nil
	}
	s, err := md5Of(l.f, int64(n-1)*l.ps, l.partLen(n))
	if err != nil {
		return s, err
	}
	l.mu.Lock()
	if l.sums == nil {
		l.sums = map[int][md5.Size]byte{}
	}
	l.sums[n] = s
	l.mu.Unlock()
	return s, nil
}

// etag is the ETag S3 gives the completed multipart upload of the file.
func (l *layout) etag() (string, error) {
	sums := make([][md5.Size]byte, l.parts())
	for i := range sums {
		s, err := l.sum(i + 1)
		if err != nil {
			return "", err
		}
		sums[i] = s
	}
	return multipartETag(sums), nil
}

// multipartETag is MD5(MD5(part 1) ‖ … ‖ MD5(part n)) in hex, "-n".
func multipartETag(sums [][md5.Size]byte) string {
	h := md5.New()
	for _, s := range sums {
		h.Write(s[:])
	}
	return hex.EncodeToString(h.Sum(nil)) + "-" + strconv.Itoa(len(sums))
}

// partSizeFor is the part size for an object of size bytes: ps, or more
// (whole MiB) when ps would need over 10,000 parts.
func partSizeFor(size, ps int64) int64 {
	if (size+ps-1)/ps > maxParts {
		ps = (size + maxParts - 1) / maxParts
		ps = (ps + 1<<20 - 1) &^ (1<<20 - 1)
	}
	return ps
}

// upload is one multipart upload in progress and its finished parts.
type upload struct {
	id   string
	mu   sync.Mutex
	done map[int]minio.CompletePart
	sums map[int][md5.Size]byte
}

func newUpload(id string) *upload {
	return &upload{id: id, done: map[int]minio.CompletePart{}, sums: map[int][md5.Size]byte{}}
}

func (u *upload) record(n int, etag string, sum [md5.Size]byte) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.done[n] = minio.CompletePart{PartNumber: n, ETag: etag}
	u.sums[n] = sum
}

// doneSet is the part numbers already uploaded (nil u: none).
func (u *upload) doneSet() map[int]bool {
	if u == nil {
		return nil
	}
	s := make(map[int]bool, len(u.done))
	for n := range u.done {
		s[n] = true
	}
	return s
}

// complete lists the parts in order, and the object's expected ETag.
func (u *upload) complete() ([]minio.CompletePart, string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	nums := make([]int, 0, len(u.done))
	for n := range u.done {
		nums = append(nums, n)
	}
	slices.Sort(nums)
	parts := make([]minio.CompletePart, len(nums))
	sums := make([][md5.Size]byte, len(nums))
	for i, n := range nums {
		parts[i], sums[i] = u.done[n], u.sums[n]
	}
	return parts, multipartETag(sums)
}

// part is one part to upload: size bytes of data from offset 0.
type part struct {
	num  int
	data io.ReaderAt
	size int64
	sum  [md5.Size]byte
}

// partSource yields the parts to upload, in order. next is called by one
// goroutine at a time; a source that is not concurrent reuses its buffer,
// so its parts are uploaded one after the other.
type partSource interface {
	next() (p part, ok bool, err error)
	concurrent() bool
}

// fileParts yields the parts of a file, except those in skip.
type fileParts struct {
	lay  *layout
	skip map[int]bool
	n    int // last part yielded
}

func (s *fileParts) concurrent() bool { return true }

func (s *fileParts) next() (part, bool, error) {
	for {
		s.n++
		if s.n > s.lay.parts() {
			return part{}, false, nil
		}
		if s.skip[s.n] {
			continue
		}
		sum, err := s.lay.sum(s.n)
		if err != nil {
			return part{}, false, fmt.Errorf("read part %d: %w", s.n, err)
		}
		off := int64(s.n-1) * s.lay.ps
		n := s.lay.partLen(s.n)
		return part{num: s.n, data: io.NewSectionReader(s.lay.f, off, n), size: n, sum: sum}, true, nil
	}
}

// streamParts yields a reader's bytes in parts of ps, buffering one part
// (plus one byte, to know whether another part follows). head is what was
// read of r already, at most ps+1 bytes; size is r's total, or -1.
type streamParts struct {
	buf  []byte // cap ps+1; buf[:n] holds data not yet yielded
	n    int
	r    io.Reader
	eof  bool
	ps   int
	num  int
	size int64 // -1: unknown
	read int64 // bytes taken from r, head included
}

func newStreamParts(head []byte, r io.Reader, size, ps int64) *streamParts {
	buf := head[:len(head):len(head)]
	if int64(cap(head)) < ps+1 {
		buf = make([]byte, len(head), ps+1)
		copy(buf, head)
	}
	return &streamParts{buf: buf[:ps+1], n: len(head), r: r, ps: int(ps), size: size, read: int64(len(head))}
}

func (s *streamParts) concurrent() bool { return false }

func (s *streamParts) next() (part, bool, error) {
	if s.num > 0 {
		// The previous part is uploaded: slide what follows it down.
		used := min(s.n, s.ps)
		s.n = copy(s.buf, s.buf[used:s.n])
	}
	if !s.eof && s.n <= s.ps {
		m, err := io.ReadFull(s.r, s.buf[s.n:])
		s.n += m
		s.read += int64(m)
		switch {
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			s.eof = true
		case err != nil:
			return part{}, false, fmt.Errorf("read: %w", err)
		}
	}
	if s.size >= 0 && (s.read > s.size || s.eof && s.read != s.size) {
		return part{}, false, fmt.Errorf("reader gave %d bytes or more, size=%d", s.read, s.size)
	}
	if s.n == 0 {
		return part{}, false, nil
	}
	s.num++
	if s.num > maxParts {
		return part{}, false, fmt.Errorf("over %d parts of %d bytes", maxParts, s.ps)
	}
	data := s.buf[:min(s.n, s.ps)]
	return part{num: s.num, data: bytesReaderAt(data), size: int64(len(data)), sum: md5.Sum(data)}, true, nil
}

type bytesReaderAt []byte

func (b bytesReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(b)) {
		return 0, io.EOF
	}
	n := copy(p, b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// readerAtParts yields the parts of size bytes of ra.
func readerAtParts(ra io.ReaderAt, size, ps int64) partSource {
	return &fileParts{lay: &layout{size: size, ps: ps, f: ra}}
}

// putMultipart uploads src's parts into up (a new upload when nil) and
// completes it with If-None-Match: *. keep leaves the upload in place
// after a failure that a later call may get past (PutFile's resume);
// otherwise, and after a final failure, the upload is aborted.
func (b *Bucket) putMultipart(ctx context.Context, op, full string, src partSource, up *upload, keep bool, pend *pending) (err error) {
	if up == nil {
		opts := minio.PutObjectOptions{}
		var id string
		err := b.retry(ctx, op, full, func(ctx context.Context) (err error) {
			id, err = b.core.NewMultipartUpload(ctx, b.bucket, full, opts)
			return err
		})
		if err != nil {
			return err
		}
		up = newUpload(id)
	}
	defer func() {
		if err == nil {
			return
		}
		var e *Error
		if keep && errors.As(err, &e) && (e.Cause == CauseRetryable || e.Cause == CauseCanceled) {
			b.log.Info("objstore: upload left to resume", "key", full, "upload", up.id, "parts_done", len(up.done), "err", err)
			return
		}
		b.abort(ctx, full, up.id, "giving up")
	}()

	workers := 1
	if src.concurrent() {
		workers = b.cfg.Concurrency
	}
	g, gctx := errgroup.WithContext(ctx)
	var mu sync.Mutex // serialises src.next
	for range workers {
		g.Go(func() error {
			for {
				mu.Lock()
				p, ok, err := src.next()
				if !ok || err != nil {
					mu.Unlock()
					if err != nil {
						return &Error{Op: op, Bucket: b.bucket, Key: full, Cause: CauseOther, Err: err}
					}
					return nil
				}
				if !src.concurrent() {
					// The buffer is reused by the next part: upload
					// this one before anyone asks.
					err = b.putPart(gctx, op, full, up, p, pend)
					mu.Unlock()
				} else {
					mu.Unlock()
					err = b.putPart(gctx, op, full, up, p, pend)
				}
				if err != nil {
					return err
				}
			}
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return b.complete(ctx, op, full, up)
}

// putPart uploads one part, with Content-MD5, retried.
func (b *Bucket) putPart(ctx context.Context, op, full string, up *upload, p part, pend *pending) error {
	md5b64 := base64.StdEncoding.EncodeToString(p.sum[:])
	var etag string
	err := b.retry(ctx, op, full, func(ctx context.Context) error {
		body := b.limited(ctx, io.NewSectionReader(p.data, 0, p.size))
		op, err := b.core.PutObjectPart(ctx, b.bucket, full, up.id, p.num, body, p.size, minio.PutObjectPartOptions{Md5Base64: md5b64})
		if err != nil {
			return fmt.Errorf("part %d: %w", p.num, err)
		}
		etag = op.ETag
		return nil
	})
	if err != nil {
		return err
	}
	up.record(p.num, etag, p.sum)
	b.st.uploaded(p.size, false)
	pend.sent(p.size)
	return nil
}

// complete finishes up with If-None-Match: *. If an attempt after a failed
// one finds the upload gone or the key taken, the first attempt may have
// completed it with its answer lost: an object with the expected ETag is
// success.
func (b *Bucket) complete(ctx context.Context, op, full string, up *upload) error {
	parts, want := up.complete()
	opts := minio.PutObjectOptions{}
	opts.SetMatchETagExcept("*")
	if b.beforeComplete != nil {
		b.beforeComplete()
	}
	attempts := 0
	err := b.retry(ctx, op, full, func(ctx context.Context) error {
		attempts++
		_, err := b.core.CompleteMultipartUpload(ctx, b.bucket, full, up.id, parts, opts)
		if err != nil {
			return fmt.Errorf("complete: %w", err)
		}
		return nil
	})
	if err != nil {
		var e *Error
		if attempts > 1 && errors.As(err, &e) && (e.Cause == CauseExists || e.Code == "NoSuchUpload") {
			if same, serr := b.holds(ctx, full, want); serr == nil && same {
				err = nil
			}
		}
	}
	if err != nil {
		return err
	}
	b.st.upObjects.Add(1)
	return nil
}

// resumable finds the incomplete upload of full whose parts match the file
// best, aborting the others; nil when there is none.
func (b *Bucket) resumable(ctx context.Context, op, full string, lay *layout) (*upload, error) {
	uploads, err := b.listUploads(ctx, op, full)
	if err != nil || len(uploads) == 0 {
		return nil, err
	}
	var best *upload
	var bestBytes int64 = -1
	for _, u := range uploads {
		parts, err := b.listParts(ctx, op, full, u.UploadID)
		if err != nil {
			var e *Error
			if errors.As(err, &e) && e.Code == "NoSuchUpload" {
				continue // aborted or completed meanwhile
			}
			return nil, err
		}
		cand := newUpload(u.UploadID)
		var good int64
		for _, p := range parts {
			n := p.PartNumber
			if n < 1 || n > lay.parts() || p.Size != lay.partLen(n) {
				continue
			}
			sum, err := lay.sum(n)
			if err != nil {
				return nil, &Error{Op: op, Bucket: b.bucket, Key: full, Cause: CauseOther, Err: fmt.Errorf("read part %d: %w", n, err)}
			}
			if hex.EncodeToString(sum[:]) != strings.Trim(p.ETag, `"`) {
				continue // another file's bytes, or a server whose ETags are not MD5s
			}
			cand.record(n, p.ETag, sum)
			good += p.Size
		}
		switch {
		case good >= bestBytes: // ties: the later upload
			if best != nil {
				b.abort(ctx, full, best.id, "a better upload to resume")
			}
			best, bestBytes = cand, good
		default:
			b.abort(ctx, full, cand.id, "a better upload to resume")
		}
	}
	if best != nil {
		b.st.resumedParts.Add(int64(len(best.done)))
		b.log.Info("objstore: resuming upload", "key", full, "upload", best.id, "parts_done", len(best.done), "parts", lay.parts())
	}
	return best, nil
}

// listUploads lists the incomplete uploads of exactly full, oldest first.
func (b *Bucket) listUploads(ctx context.Context, op, full string) ([]minio.ObjectMultipartInfo, error) {
	var out []minio.ObjectMultipartInfo
	keyMarker, idMarker := "", ""
	for {
		var res minio.ListMultipartUploadsResult
		err := b.retry(ctx, op, full, func(ctx context.Context) (err error) {
			res, err = b.core.ListMultipartUploads(ctx, b.bucket, full, keyMarker, idMarker, "", 1000)
			return err
		})
		var e *Error
		if errors.As(err, &e) && e.Code == "NoSuchUpload" {
			return nil, nil // gofakes3's answer for a bucket that never had an upload
		}
		if err != nil {
			return nil, err
		}
		for _, u := range res.Uploads {
			if u.Key == full {
				out = append(out, u)
			}
		}
		if !res.IsTruncated || (res.NextKeyMarker == keyMarker && res.NextUploadIDMarker == idMarker) {
			break
		}
		keyMarker, idMarker = res.NextKeyMarker, res.NextUploadIDMarker
	}
	slices.SortStableFunc(out, func(a, b minio.ObjectMultipartInfo) int { return a.Initiated.Compare(b.Initiated) })
	return out, nil
}

// listParts lists the uploaded parts of one upload.
func (b *Bucket) listParts(ctx context.Context, op, full, id string) ([]minio.ObjectPart, error) {
	var out []minio.ObjectPart
	marker := 0
	for {
		var res minio.ListObjectPartsResult
		err := b.retry(ctx, op, full, func(ctx context.Context) (err error) {
			res, err = b.core.ListObjectParts(ctx, b.bucket, full, id, marker, 1000)
			return err
		})
		if err != nil {
			return nil, err
		}
		out = append(out, res.ObjectParts...)
		if !res.IsTruncated || res.NextPartNumberMarker <= marker {
			break
		}
		marker = res.NextPartNumberMarker
	}
	return out, nil
}

// abort aborts an upload, best effort: it runs even when ctx has ended
// (within 30 s), and a failure is only logged, since an upload left
// behind costs storage, not correctness (AbortUploads cleans up).
func (b *Bucket) abort(ctx context.Context, full, id, why string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	err := b.retry(ctx, "abort", full, func(ctx context.Context) error {
		return b.core.AbortMultipartUpload(ctx, b.bucket, full, id)
	})
	if err != nil && !strings.Contains(err.Error(), "NoSuchUpload") {
		b.log.Warn("objstore: could not abort an upload", "key", full, "upload", id, "why", why, "err", err)
		return
	}
	b.log.Debug("objstore: upload aborted", "key", full, "upload", id, "why", why)
}

// AbortUploads aborts the incomplete multipart uploads under prefix
// (relative, as for List) started more than olderThan ago, and says how
// many it aborted. Uploads PutFile left to resume and nobody resumed (the
// file is gone) are what it is for; uploads in progress are younger than
// any sensible olderThan.
func (b *Bucket) AbortUploads(ctx context.Context, prefix string, olderThan time.Duration) (n int, err error) {
	const op = "abort-uploads"
	defer b.count(&err)
	if !validPrefix(prefix) {
		return 0, &Error{Op: op, Bucket: b.bucket, Key: b.prefix + prefix, Cause: CauseOther, Err: fmt.Errorf("prefix %q: %w", prefix, ErrInvalidKey)}
	}
	full := b.prefix + prefix
	cutoff := b.cfg.Clock.Now().Add(-olderThan)
	keyMarker, idMarker := "", ""
	for {
		var res minio.ListMultipartUploadsResult
		err := b.retry(ctx, op, full, func(ctx context.Context) (err error) {
			res, err = b.core.ListMultipartUploads(ctx, b.bucket, full, keyMarker, idMarker, "", 1000)
			return err
		})
		if err != nil {
			return n, err
		}
		for _, u := range res.Uploads {
			if !strings.HasPrefix(u.Key, full) || !u.Initiated.Before(cutoff) {
				continue
			}
			err := b.retry(ctx, op, u.Key, func(ctx context.Context) error {
				return b.core.AbortMultipartUpload(ctx, b.bucket, u.Key, u.UploadID)
			})
			if err != nil {
				return n, err
			}
			n++
		}
		if !res.IsTruncated || (res.NextKeyMarker == keyMarker && res.NextUploadIDMarker == idMarker) {
			return n, nil
		}
		keyMarker, idMarker = res.NextKeyMarker, res.NextUploadIDMarker
	}
}
