package operators

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unsafe"

	"github.com/cespare/xxhash/v2"
	"github.com/expr-lang/expr/vm"

	"github.com/runnel-io/runnel/operators/jsonfield"
	"github.com/runnel-io/runnel/operators/spec"
)

// ErrFiltered is returned by Decode for a record the pipeline's filter drops.
// It is not a failure: nothing goes to the dead-letter output.
var ErrFiltered = errors.New("operators: filtered out")

// ErrBadRecord marks a payload that cannot become a record: invalid JSON, a
// missing or mistyped event time or key, a value of the wrong type, an
// expression that fails on it. Such payloads go to the dead-letter output.
var ErrBadRecord = errors.New("operators: bad record")

// RecordError says why a payload could not become a record; it is the
// dead letter's reason. errors.Is(err, ErrBadRecord) holds.
type RecordError struct{ Reason string }

func (e *RecordError) Error() string { return e.Reason }
func (e *RecordError) Unwrap() error { return ErrBadRecord }

func badf(format string, args ...any) error {
	return &RecordError{Reason: fmt.Sprintf(format, args...)}
}

// MaxKeyBytes bounds a record's encoded key. A record whose key is longer
// is a dead letter: the hub accepts keys up to this length (it announces
// its own limit too), so whatever an edge commits the hub takes.
const MaxKeyBytes = 4096

// Record is one decoded event: its key, event time and the aggregate inputs
// the pipeline uses, nothing else. Its slices are reused by the Decoder that
// filled it.
type Record struct {
	Key    []byte // encoded key fields, see AppendKeyJSON
	Hash   uint64 // xxhash of Key
	Time   int64  // event time, Unix ms
	Nums   []float64
	Hashes []uint64
	// ID is the hash of the event_id fields (0 when the pipeline has
	// none): equal for a reading and its MQTT redeliveries.
	ID uint64
}

// Decoder turns payloads into Records for one Pipeline. Each goroutine
// needs its own (NewDecoder); a Decoder is not safe for concurrent use.
type Decoder struct {
	p     *Pipeline
	ex    *jsonfield.Extractor
	vals  []jsonfield.Value
	bufs  [][]byte // backing bytes of computed values
	env   map[string]any
	vm    vm.VM
	idBuf []byte
}

// NewDecoder returns a Decoder for p.
func (p *Pipeline) NewDecoder() *Decoder {
	ex, err := jsonfield.New(p.payload)
	if err != nil {
		panic(err) // Compile checked the paths
	}
	return &Decoder{
		p:    p,
		ex:   ex,
		vals: make([]jsonfield.Value, len(p.fieldNames)),
		bufs: make([][]byte, len(p.fieldNames)),
		env:  make(map[string]any),
	}
}

// NewRecord returns a Record sized for p.
func (p *Pipeline) NewRecord() *Record {
	return &Record{Nums: make([]float64, len(p.numInputs)), Hashes: make([]uint64, len(p.hashInput))}
}

// Decode fills r from payload (topic feeds the topic fields). It returns
// ErrFiltered when the filter drops the record and an error wrapping
// ErrBadRecord, with the reason, when the payload cannot become a record.
// Decode allocates nothing for pipelines without compute or filter
// expressions.
func (d *Decoder) Decode(payload []byte, topic string, r *Record) error {
	p := d.p
	np := len(p.payload)
	if err := d.ex.Extract(payload, d.vals[:np]); err != nil {
		if se, ok := err.(*jsonfield.SyntaxError); ok {
			return badf("invalid JSON at byte %d: %s", se.Offset, se.Msg)
		}
		return badf("invalid JSON: %v", err)
	}
	if len(p.topicLevels) > 0 {
		d.topicFields(topic)
	}
	if len(p.computed) > 0 || p.filter != nil {
		if err := d.evalExprs(); err != nil {
			return err
		}
	}
	t, err := d.eventTime()
	if err != nil {
		return err
	}
	r.Time = t
	r.Key = r.Key[:0]
	for _, f := range p.keyFields {
		if r.Key, err = d.appendKeyField(r.Key, f); err != nil {
			return err
		}
	}
	if len(r.Key) > MaxKeyBytes {
		return badf("key of %d bytes (encoded), at most %d", len(r.Key), MaxKeyBytes)
	}
	r.Hash = xxhash.Sum64(r.Key)
	r.ID = 0
	if len(p.idFields) > 0 {
		d.idBuf = d.idBuf[:0]
		for _, f := range p.idFields {
			if d.idBuf, err = d.appendKeyField(d.idBuf, f); err != nil {
				return badf("event_id: %v", err)
			}
		}
		r.ID = xxhash.Sum64(d.idBuf) | 1
	}
	for i, f := range p.numInputs {
		v := d.vals[f]
		switch v.Kind {
		case jsonfield.Missing, jsonfield.Null:
			r.Nums[i] = math.NaN()
		case jsonfield.Number:
			x, err := v.Float()
			if err != nil {
				return badf("field %s: %v", p.fieldNames[f], err)
			}
			r.Nums[i] = x
		default:
			return badf("field %s: want a number, got %s", p.fieldNames[f], v.Kind)
		}
	}
	for i, f := range p.hashInput {
		v := d.vals[f]
		switch v.Kind {
		case jsonfield.Missing, jsonfield.Null:
			r.Hashes[i] = 0
		default:
			h := valueHash(v)
			if h == 0 {
				h = 1 // 0 means null to the aggregates
			}
			r.Hashes[i] = h
		}
	}
	return nil
}

func (d *Decoder) topicFields(topic string) {
	np := len(d.p.payload)
	for i, lvl := range d.p.topicLevels {
		d.vals[np+i] = jsonfield.Value{Kind: jsonfield.Missing}
		level, start := 0, 0
		for j := 0; j <= len(topic); j++ {
			if j < len(topic) && topic[j] != '/' {
				continue
			}
			if level == lvl {
				// Read-only alias of the topic: values never outlive Decode.
				b := unsafe.Slice(unsafe.StringData(topic[start:j]), j-start)
				d.vals[np+i] = jsonfield.Value{Kind: jsonfield.String, Raw: b}
				break
			}
			level++
			start = j + 1
		}
	}
}

func (d *Decoder) evalExprs() error {
	p := d.p
	for k := range d.env {
		delete(d.env, k)
	}
	fill := func(ce *compiledExpr) {
		for _, f := range ce.uses {
			d.env[p.fieldNames[f]] = toAny(d.vals[f])
		}
	}
	for i := range p.computed {
		ce := &p.computed[i]
		fill(ce)
		out, err := d.vm.Run(ce.prog, d.env)
		if err != nil {
			return badf("compute %s: %v", p.fieldNames[ce.field], firstLine(err.Error()))
		}
		d.vals[ce.field], d.bufs[ce.field] = fromAny(out, d.bufs[ce.field][:0])
		d.env[p.fieldNames[ce.field]] = out
	}
	if p.filter != nil {
		fill(p.filter)
		out, err := d.vm.Run(p.filter.prog, d.env)
		if err != nil {
			return badf("filter: %v", firstLine(err.Error()))
		}
		if keep, _ := out.(bool); !keep {
			return ErrFiltered
		}
	}
	return nil
}

func toAny(v jsonfield.Value) any {
	switch v.Kind {
	case jsonfield.Number:
		if x, err := v.Float(); err == nil {
			return x
		}
	case jsonfield.String, jsonfield.Object, jsonfield.Array:
		return string(v.Raw)
	case jsonfield.Bool:
		b, _ := v.Bool()
		return b
	}
	return nil
}

func fromAny(x any, buf []byte) (jsonfield.Value, []byte) {
	switch x := x.(type) {
	case nil:
		return jsonfield.Value{Kind: jsonfield.Null}, buf
	case bool:
		buf = strconv.AppendBool(buf, x)
		return jsonfield.Value{Kind: jsonfield.Bool, Raw: buf}, buf
	case string:
		buf = append(buf, x...)
		return jsonfield.Value{Kind: jsonfield.String, Raw: buf}, buf
	case float64:
		buf = strconv.AppendFloat(buf, x, 'g', -1, 64)
	case int:
		buf = strconv.AppendInt(buf, int64(x), 10)
	case int64:
		buf = strconv.AppendInt(buf, x, 10)
	default:
		buf = fmt.Appendf(buf, "%v", x)
		return jsonfield.Value{Kind: jsonfield.String, Raw: buf}, buf
	}
	return jsonfield.Value{Kind: jsonfield.Number, Raw: buf}, buf
}

func (d *Decoder) eventTime() (int64, error) {
	p := d.p
	v := d.vals[p.timeField]
	name := p.fieldNames[p.timeField]
	if p.timeUnit == spec.UnitRFC3339 {
		if v.Kind != jsonfield.String {
			return 0, badf("event time %s: want an RFC 3339 string, got %s", name, v.Kind)
		}
		t, err := time.Parse(time.RFC3339Nano, string(v.Raw))
		if err != nil {
			return 0, badf("event time %s: %v", name, err)
		}
		return t.UnixMilli(), nil
	}
	if v.Kind != jsonfield.Number {
		return 0, badf("event time %s: want a number (%s), got %s", name, p.timeUnit, v.Kind)
	}
	if n, err := v.Int(); err == nil {
		switch p.timeUnit {
		case spec.UnitS:
			if n > math.MaxInt64/1000 || n < math.MinInt64/1000 {
				return 0, badf("event time %s: %d s is out of range", name, n)
			}
			return n * 1000, nil
		case spec.UnitUS:
			return floorDiv(n, 1000), nil
		case spec.UnitNS:
			return floorDiv(n, 1000000), nil
		}
		return n, nil
	}
	f, err := v.Float()
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, badf("event time %s: %q is not a time", name, v.Raw)
	}
	var ms float64
	switch p.timeUnit {
	case spec.UnitS:
		// Round to microseconds first: 1700000000.123 s must not become
		// ...122 ms through binary floating point.
		ms = math.Floor(math.Round(f*1e6) / 1e3)
	case spec.UnitUS:
		ms = math.Floor(f / 1e3)
	case spec.UnitNS:
		ms = math.Floor(f / 1e6)
	default:
		ms = math.Floor(f)
	}
	if ms >= math.MaxInt64 || ms < math.MinInt64 {
		return 0, badf("event time %s: %q is out of range", name, v.Raw)
	}
	return int64(ms), nil
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// Key encoding: per key field, a kind byte ('s' string, 'n' number, 'b'
// bool), a uvarint length and the bytes (strings unescaped, numbers in
// shortest form so 42 and 42.0 are one key).
func (d *Decoder) appendKeyField(dst []byte, f int) ([]byte, error) {
	v := d.vals[f]
	var kind byte
	switch v.Kind {
	case jsonfield.String:
		kind = 's'
	case jsonfield.Bool:
		kind = 'b'
	case jsonfield.Number:
		x, err := v.Float()
		if err != nil {
			return dst, badf("key %s: %v", d.p.fieldNames[f], err)
		}
		dst = append(dst, 'n', 0) // length patched below
		start := len(dst)
		dst = strconv.AppendFloat(dst, x, 'g', -1, 64)
		if n := len(dst) - start; n < 0x80 {
			dst[start-1] = byte(n)
			return dst, nil
		}
		return dst, badf("key %s: number too long", d.p.fieldNames[f])
	case jsonfield.Missing:
		return dst, badf("key %s: missing", d.p.fieldNames[f])
	default:
		return dst, badf("key %s: want a string, number or bool, got %s", d.p.fieldNames[f], v.Kind)
	}
	dst = append(dst, kind)
	dst = binary.AppendUvarint(dst, uint64(len(v.Raw)))
	return append(dst, v.Raw...), nil
}

func valueHash(v jsonfield.Value) uint64 {
	var d xxhash.Digest
	d.Reset()
	var kb [1]byte
	kb[0] = byte(v.Kind)
	_, _ = d.Write(kb[:])
	if v.Kind == jsonfield.Number {
		if x, err := v.Float(); err == nil {
			var nb [24]byte
			_, _ = d.Write(strconv.AppendFloat(nb[:0], x, 'g', -1, 64))
			return d.Sum64()
		}
	}
	_, _ = d.Write(v.Raw)
	return d.Sum64()
}
