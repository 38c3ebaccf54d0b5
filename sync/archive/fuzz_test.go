package archive_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/runnel-io/runnel/sync/archive"
)

// FuzzManifest: DecodeManifest never panics, and what it accepts encodes
// back to a manifest that decodes the same.
func FuzzManifest(f *testing.F) {
	m := &archive.Manifest{Format: 1, Pipeline: "temps", Date: "2026-03-01", Hour: 10, Generation: 3, Log: "0123456789abcdef",
		Cause: "append", LogFrom: 1, LogTo: 9, Created: 1, Files: []archive.File{{Path: "pipeline=temps/date=2026-03-01/hour=10/part-0123456789abcdef-00000000000000000001-0000.parquet",
			Rows: 9, Bytes: 100, Schema: "fedcba9876543210"}}}
	f.Add(m.Encode())
	f.Add([]byte(`{"format":1}`))
	f.Add([]byte(`{"format":1,"pipeline":"a","date":"2026-02-30","hour":24,"generation":1,"log":"0123456789abcdef","cause":"compact","created_ms":0,"files":[]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := archive.DecodeManifest(b)
		if err != nil {
			return
		}
		m2, err := archive.DecodeManifest(m.Encode())
		if err != nil {
			t.Fatalf("a decoded manifest does not decode again: %v", err)
		}
		if !bytes.Equal(m.Encode(), m2.Encode()) {
			t.Fatal("a manifest changes through encode and decode")
		}
	})
}

// FuzzEntry: DecodeEntry never panics, and an entry it accepts encodes
// back to the same bytes.
func FuzzEntry(f *testing.F) {
	r := archive.Row{Schema: 7, Start: -5, End: 10, Version: 2, Edges: 3, Emitted: 99, Revisions: []uint32{3, 4}, Key: encKey("a", "1"),
		Values: []archive.Value{{Kind: archive.Int, Int: -1}, {}, {Kind: archive.Float, Float: math.NaN()}}}
	f.Add(archive.AppendEntry(nil, &r))
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		var r archive.Row
		if err := archive.DecodeEntry(b, &r); err != nil {
			return
		}
		if got := archive.AppendEntry(nil, &r); !bytes.Equal(got, b) {
			t.Fatalf("entry %x re-encodes as %x", b, got)
		}
	})
}

// FuzzSchema: DecodeSchema never panics; what it accepts re-encodes
// to the same bytes.
func FuzzSchema(f *testing.F) {
	f.Add(temps.AppendEncode(nil))
	f.Add(flow.AppendEncode(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := archive.DecodeSchema(b)
		if err != nil {
			return
		}
		if got := s.AppendEncode(nil); !bytes.Equal(got, b) {
			t.Fatalf("schema %x re-encodes as %x", b, got)
		}
	})
}

// FuzzRows builds Parquet rows from arbitrary results: keys of any bytes
// (refused unless in the key encoding), any values, NaN and infinities,
// any revisions; a row the archive takes reads back from the Parquet file
// as RecordOf says, and one it refuses is refused with ErrInvalid.
func FuzzRows(f *testing.F) {
	f.Add(encKey("d1", "3"), int64(0), int64(60_000), uint32(1), uint32(2), int64(5), []byte{1, 2}, uint8(1), int64(7), math.Float64bits(1.5), uint8(2))
	f.Add([]byte("s\x03a\xffb"), int64(-1), int64(1), uint32(0), uint32(0), int64(0), []byte{}, uint8(0), int64(0), math.Float64bits(math.NaN()), uint8(0))
	f.Fuzz(func(t *testing.T, key []byte, start, end int64, version, edges uint32, emitted int64, revs []byte, k0 uint8, i0 int64, f1 uint64, k1 uint8) {
		r := archive.Row{Schema: temps.ID(), Start: start, End: end, Version: version, Edges: edges, Emitted: emitted, Key: key}
		for _, b := range revs {
			r.Revisions = append(r.Revisions, uint32(b))
		}
		r.Values = []archive.Value{
			{Kind: archive.ValueKind(k0 % 3), Int: i0},
			{Kind: archive.ValueKind(k1 % 3), Float: math.Float64frombits(f1), Int: int64(f1)},
			{Kind: archive.Float, Float: float64(version)},
		}
		if r.Values[0].Kind == archive.Float {
			r.Values[0].Float = float64(i0)
		}
		want, werr := archive.RecordOf(temps, &r)
		b, err := archive.BuildFile(temps, []archive.Row{r})
		if werr != nil || err != nil {
			if err == nil {
				t.Fatalf("RecordOf refuses the row (%v), the file builder takes it", werr)
			}
			if !errorsIsInvalid(err) {
				t.Fatalf("a refused row's error does not match ErrInvalid: %v", err)
			}
			return
		}
		_, recs, err := archive.ReadFile(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 1 || !sameRecord(recs[0], want) {
			t.Fatalf("read back %+v\nwant      %+v", recs, want)
		}
	})
}

var _ = binary.AppendUvarint

func errorsIsInvalid(err error) bool { return errors.Is(err, archive.ErrInvalid) }
