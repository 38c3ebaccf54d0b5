package state_test

import (
	"bytes"
	"errors"
	"math"
	"testing"

	"github.com/runnel-io/runnel/state"
)

func TestCodecRoundTrip(t *testing.T) {
	var b []byte
	b = state.AppendUvarint(b, 0)
	b = state.AppendUvarint(b, math.MaxUint64)
	b = state.AppendVarint(b, -1)
	b = state.AppendVarint(b, math.MinInt64)
	b = state.AppendFixed64(b, 0x0102030405060708)
	b = state.AppendFloat64(b, math.Copysign(0, -1))
	b = state.AppendBytes(b, []byte("payload"))
	b = state.AppendBytes(b, nil)
	d := state.NewDecoder(b)
	if v := d.Uvarint(); v != 0 {
		t.Errorf("uvarint 0: %d", v)
	}
	if v := d.Uvarint(); v != math.MaxUint64 {
		t.Errorf("uvarint max: %d", v)
	}
	if v := d.Varint(); v != -1 {
		t.Errorf("varint -1: %d", v)
	}
	if v := d.Varint(); v != math.MinInt64 {
		t.Errorf("varint min: %d", v)
	}
	if v := d.Fixed64(); v != 0x0102030405060708 {
		t.Errorf("fixed64: %x", v)
	}
	if v := d.Float64(); !math.Signbit(v) || v != 0 {
		t.Errorf("float64 -0: %v", v)
	}
	if v := d.Bytes(); string(v) != "payload" {
		t.Errorf("bytes: %q", v)
	}
	if v := d.Bytes(); len(v) != 0 {
		t.Errorf("empty bytes: %q", v)
	}
	if err := d.Finish(); err != nil {
		t.Fatal(err)
	}
}

func TestDecoderErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		read func(*state.Decoder)
		want string
	}{
		{"empty uvarint", nil, func(d *state.Decoder) { d.Uvarint() }, "truncated"},
		{"cut uvarint", []byte{0x80}, func(d *state.Decoder) { d.Uvarint() }, "truncated"},
		{"non-minimal uvarint", []byte{0x81, 0x00}, func(d *state.Decoder) { d.Uvarint() }, "not minimal"},
		{"overflowing uvarint", bytes.Repeat([]byte{0xff}, 11), func(d *state.Decoder) { d.Uvarint() }, "overflows"},
		{"short fixed64", []byte{1, 2, 3}, func(d *state.Decoder) { d.Fixed64() }, "3 of 8 bytes"},
		{"long bytes", []byte{5, 'a', 'b'}, func(d *state.Decoder) { d.Bytes() }, "exceeds"},
		{"byte past end", nil, func(d *state.Decoder) { d.Byte() }, "truncated"},
		{"trailing", []byte{1, 2}, func(d *state.Decoder) { d.Byte(); d.Finish() }, "1 trailing"},
		{"first error sticks", []byte{0x80}, func(d *state.Decoder) { d.Uvarint(); d.Fixed64(); d.Bytes() }, "uvarint at offset 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := state.NewDecoder(tc.in)
			tc.read(&d)
			err := d.Err()
			if !errors.Is(err, state.ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
			if !bytes.Contains([]byte(err.Error()), []byte(tc.want)) {
				t.Fatalf("err = %v, want mention of %q", err, tc.want)
			}
		})
	}
}

// FuzzDecoder decodes arbitrary bytes as a sequence of every field type;
// whatever decodes must re-encode to the same bytes (each value has one
// encoding), and nothing may panic.
func FuzzDecoder(f *testing.F) {
	f.Add([]byte{0x00})
	f.Add(state.AppendBytes(state.AppendFixed64(state.AppendVarint(state.AppendUvarint(nil, 300), -5), 9), []byte("x")))
	f.Add([]byte{0x80, 0x00})
	f.Fuzz(func(t *testing.T, in []byte) {
		d := state.NewDecoder(in)
		var out []byte
		for i := 0; d.Err() == nil && d.Len() > 0; i++ {
			start := d.Offset()
			switch i % 4 {
			case 0:
				out = state.AppendUvarint(out, d.Uvarint())
			case 1:
				out = state.AppendVarint(out, d.Varint())
			case 2:
				out = state.AppendFixed64(out, d.Fixed64())
			case 3:
				out = state.AppendBytes(out, d.Bytes())
			}
			if d.Err() != nil {
				out = append(out[:start:start], in[start:]...) // undecoded tail
				if !errors.Is(d.Err(), state.ErrCorrupt) {
					t.Fatalf("error not ErrCorrupt: %v", d.Err())
				}
				break
			}
		}
		if d.Err() == nil && !bytes.Equal(out, in) {
			t.Fatalf("re-encoding %x gave %x", in, out)
		}
	})
}
