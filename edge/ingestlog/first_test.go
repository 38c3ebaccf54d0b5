package ingestlog_test

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/runnel-io/runnel/edge/ingestlog"
)

// TestFirst: a log created with Options.First starts there (a restored
// edge's log continues at its checkpoint's position), keeps doing so
// when reopened without it, and an existing log ignores it.
func TestFirst(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	const first = 1_000_000
	l, rec, err := ingestlog.Open(ctx, dir, &ingestlog.Options{First: first, Sync: ingestlog.SyncNever})
	if err != nil {
		t.Fatal(err)
	}
	if rec.First != first || rec.End != first || l.First() != first || l.Durable() != first {
		t.Fatalf("new log at %d: recovery %+v, First %d, Durable %d", first, rec, l.First(), l.Durable())
	}
	pos, err := l.Append(ctx, []byte("a"))
	if err != nil || pos != first {
		t.Fatalf("first Append: position %d, %v; want %d", pos, err, first)
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Reopened without First, and with another one: the same log.
	for _, o := range []*ingestlog.Options{{}, {First: 5}} {
		l, rec, err = ingestlog.Open(ctx, dir, o)
		if err != nil {
			t.Fatal(err)
		}
		if rec.First != first || rec.End != first+1 {
			t.Fatalf("reopened: recovery %+v, want %d to %d", rec, first, first+1)
		}
		rd, err := l.NewReader(first)
		if err != nil {
			t.Fatal(err)
		}
		r, p, err := rd.Next()
		if err != nil || p != first || string(r) != "a" {
			t.Fatalf("read %q at %d, %v", r, p, err)
		}
		if _, _, err := rd.Next(); !errors.Is(err, io.EOF) {
			t.Fatalf("after the one record: %v, want EOF", err)
		}
		rd.Close()
		l.Close(ctx)
	}
}
