package state

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Value codecs: small, allocation-free helpers for operators that encode
// their state values, and for this package's own layout. Encoders append to
// a caller's buffer; Decoder reads with bounds checks and remembers the first
// error, which is of the ErrCorrupt class and names the offset.
//
// Integers are LEB128 (uvarint), zig-zag LEB128 (varint), or 8 bytes little
// endian (fixed64). A uvarint must be minimal: a final 0x00 byte after other
// bytes is rejected, so every number has exactly one encoding and encoded
// state can be compared byte for byte.

// AppendUvarint appends v as a uvarint.
func AppendUvarint(dst []byte, v uint64) []byte { return binary.AppendUvarint(dst, v) }

// AppendVarint appends v as a zig-zag varint.
func AppendVarint(dst []byte, v int64) []byte { return binary.AppendVarint(dst, v) }

// AppendFixed64 appends v as 8 bytes, little endian.
func AppendFixed64(dst []byte, v uint64) []byte { return binary.LittleEndian.AppendUint64(dst, v) }

// AppendFloat64 appends the IEEE 754 bits of f as a fixed64, bit for bit
// (NaN payloads and -0 are kept).
func AppendFloat64(dst []byte, f float64) []byte { return AppendFixed64(dst, math.Float64bits(f)) }

// AppendBytes appends b with a uvarint length prefix.
func AppendBytes(dst, b []byte) []byte { return append(AppendUvarint(dst, uint64(len(b))), b...) }

// Decoder reads values written by the Append functions from one buffer.
// After the first error every method returns zero and Err reports that
// error, so a caller decodes a whole record and checks once.
//
// The zero Decoder reads an empty buffer. A Decoder does not allocate.
type Decoder struct {
	buf []byte
	off int
	err error
}

// NewDecoder returns a Decoder reading b. It does not copy b.
func NewDecoder(b []byte) Decoder { return Decoder{buf: b} }

// Err returns the first decoding error, or nil.
func (d *Decoder) Err() error { return d.err }

// Offset returns how many bytes have been consumed.
func (d *Decoder) Offset() int { return d.off }

// Len returns how many bytes remain.
func (d *Decoder) Len() int { return len(d.buf) - d.off }

// Finish returns the first error, or an error if bytes remain unread: a
// decoder must be handed exactly one encoding.
func (d *Decoder) Finish() error {
	if d.err == nil && d.off != len(d.buf) {
		d.err = corruptf("state: decode: %d trailing bytes at offset %d", len(d.buf)-d.off, d.off)
	}
	return d.err
}

func (d *Decoder) fail(what string, why string) {
	if d.err == nil {
		d.err = corruptf("state: decode: %s at offset %d: %s", what, d.off, why)
	}
}

// Byte reads one byte.
func (d *Decoder) Byte() byte {
	if d.err != nil {
		return 0
	}
	if d.off >= len(d.buf) {
		d.fail("byte", "truncated")
		return 0
	}
	b := d.buf[d.off]
	d.off++
	return b
}

// Uvarint reads a minimal uvarint.
func (d *Decoder) Uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.buf[d.off:])
	switch {
	case n == 0:
		d.fail("uvarint", "truncated")
		return 0
	case n < 0:
		d.fail("uvarint", "overflows 64 bits")
		return 0
	case n > 1 && d.buf[d.off+n-1] == 0:
		d.fail("uvarint", "not minimal")
		return 0
	}
	d.off += n
	return v
}

// Varint reads a minimal zig-zag varint.
func (d *Decoder) Varint() int64 {
	u := d.Uvarint()
	return int64(u>>1) ^ -int64(u&1)
}

// Fixed64 reads 8 bytes, little endian.
func (d *Decoder) Fixed64() uint64 {
	if d.err != nil {
		return 0
	}
	if len(d.buf)-d.off < 8 {
		d.fail("fixed64", fmt.Sprintf("truncated: %d of 8 bytes", len(d.buf)-d.off))
		return 0
	}
	v := binary.LittleEndian.Uint64(d.buf[d.off:])
	d.off += 8
	return v
}

// Float64 reads a fixed64 as IEEE 754 bits.
func (d *Decoder) Float64() float64 { return math.Float64frombits(d.Fixed64()) }

// Bytes reads a uvarint length and that many bytes. The result aliases the
// decoder's buffer: it must not be modified, and is valid as long as the
// buffer is.
func (d *Decoder) Bytes() []byte {
	n := d.Uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.buf)-d.off) {
		d.fail("bytes", fmt.Sprintf("length %d exceeds the %d bytes left", n, len(d.buf)-d.off))
		return nil
	}
	b := d.buf[d.off : d.off+int(n) : d.off+int(n)]
	d.off += int(n)
	return b
}
