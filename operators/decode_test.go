package operators_test

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/runnel-io/runnel/operators"
)

const decodeSpec = `name: dec
source: {mqtt: {topic: "plant/+/temp", topic_fields: {site: 1}}}
event_time: {field: ts, unit: %s}
key: [site, meta.device]
compute: {temp_f: "temp * 1.8 + 32"}
window: {tumbling: 1m}
aggregates:
  n: count()
  avg_f: avg(temp_f)
  max: max(temp)
  seen: distinct(meta.device)
`

func decodeSpecUnit(unit string) string {
	return replaceOnce(decodeSpec, "%s", unit)
}

func replaceOnce(s, old, new string) string {
	for i := 0; i+len(old) <= len(s); i++ {
		if s[i:i+len(old)] == old {
			return s[:i] + new + s[i+len(old):]
		}
	}
	return s
}

func TestDecodeTimeUnits(t *testing.T) {
	for _, tc := range []struct {
		unit, ts string
		want     int64
	}{
		{"ms", "1700000000123", 1700000000123},
		{"ms", "1700000000123.9", 1700000000123},
		{"s", "1700000000", 1700000000000},
		{"s", "1700000000.123", 1700000000123},
		{"s", "1700000000.1239", 1700000000123},
		{"us", "1700000000123456", 1700000000123},
		{"ns", "1700000000123456789", 1700000000123},
		{"ns", "-1500000", -2},
		{"rfc3339", `"2023-11-14T22:13:20.123Z"`, 1700000000123},
		{"rfc3339", `"2023-11-14T23:13:20.123+01:00"`, 1700000000123},
	} {
		p := compile(t, decodeSpecUnit(tc.unit))
		dec, rec := p.NewDecoder(), p.NewRecord()
		payload := `{"ts":` + tc.ts + `,"temp":20,"meta":{"device":"d1"}}`
		if err := dec.Decode([]byte(payload), "plant/north/temp", rec); err != nil {
			t.Fatalf("%s %s: %v", tc.unit, tc.ts, err)
		}
		if rec.Time != tc.want {
			t.Errorf("%s %s: time %d, want %d", tc.unit, tc.ts, rec.Time, tc.want)
		}
	}
}

func TestDecodeFields(t *testing.T) {
	p := compile(t, decodeSpecUnit("ms"))
	dec, rec := p.NewDecoder(), p.NewRecord()
	if err := dec.Decode([]byte(`{"ts":1,"temp":100,"meta":{"device":"d\u00e9"}}`), "plant/north/temp", rec); err != nil {
		t.Fatal(err)
	}
	key, err := p.AppendKeyJSON(nil, rec.Key)
	if err != nil {
		t.Fatal(err)
	}
	if string(key) != `{"site":"north","meta.device":"dé"}` {
		t.Errorf("key %s", key)
	}
	// Nums slots follow the spec: temp_f (computed), temp.
	if len(rec.Nums) != 2 || rec.Nums[0] != 212 || rec.Nums[1] != 100 {
		t.Errorf("nums %v, want [212 100]", rec.Nums)
	}
	if len(rec.Hashes) != 1 || rec.Hashes[0] == 0 {
		t.Errorf("hashes %v", rec.Hashes)
	}
	// A missing value is null (NaN), not an error.
	if err := dec.Decode([]byte(`{"ts":1,"meta":{"device":"x"}}`), "plant/north/temp", rec); err == nil {
		t.Error("compute over a missing field: want a dead letter (the expression fails)")
	}
	p2 := compile(t, `name: n
source: {mqtt: {topic: "t"}}
event_time: {field: ts}
key: [d]
window: {tumbling: 1s}
aggregates: {m: max(v)}
`)
	dec2, rec2 := p2.NewDecoder(), p2.NewRecord()
	if err := dec2.Decode([]byte(`{"ts":1,"d":42.0}`), "t", rec2); err != nil {
		t.Fatal(err)
	}
	if !math.IsNaN(rec2.Nums[0]) {
		t.Errorf("missing v: %v, want NaN (null)", rec2.Nums[0])
	}
	key2, _ := p2.AppendKeyJSON(nil, rec2.Key)
	if string(key2) != `{"d":42}` {
		t.Errorf("numeric key %s, want {\"d\":42}", key2)
	}
}

func TestDecodeAllocs(t *testing.T) {
	p := compile(t, `name: n
source: {mqtt: {topic: "t"}}
event_time: {field: ts}
key: [device]
window: {tumbling: 1s}
aggregates: {n: count(), a: avg(temp), m: max(temp), d: distinct(site)}
`)
	dec, rec := p.NewDecoder(), p.NewRecord()
	payload := []byte(`{"device":"sensor-000042","site":"north","ts":1700000000000,"temp":21.57,"meta":{"fw":"1.4.2"}}`)
	allocs := testing.AllocsPerRun(1000, func() {
		if err := dec.Decode(payload, "t", rec); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Decode allocates %.1f times per record, want 0", allocs)
	}
}

// FuzzDecode: any payload either decodes or is a dead letter with a
// reason; nothing panics, and a decoded key renders as valid JSON.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"ts":1700000000000,"temp":21.5,"meta":{"device":"d1"}}`,
		`{"ts":"x"}`, `{"ts":1,"temp":1e999,"meta":{"device":"\ud800"}}`, `{}`, `[]`, ``, `{"ts":1,"meta":{"device":{}}}`,
		`{"ts":-9223372036854775808,"temp":-0,"meta":{"device":true}}`,
	} {
		f.Add([]byte(s), "plant/north/temp")
	}
	p := compile(f, decodeSpecUnit("ms"))
	dec, rec := p.NewDecoder(), p.NewRecord()
	f.Fuzz(func(t *testing.T, payload []byte, topic string) {
		err := dec.Decode(payload, topic, rec)
		if err != nil {
			var re *operators.RecordError
			if !errors.As(err, &re) && !errors.Is(err, operators.ErrFiltered) {
				t.Fatalf("error %v is neither a RecordError nor ErrFiltered", err)
			}
			if re != nil && re.Reason == "" {
				t.Fatal("empty reason")
			}
			return
		}
		key, err := p.AppendKeyJSON(nil, rec.Key)
		if err != nil || !json.Valid(key) {
			t.Fatalf("key %q renders as %q (%v)", rec.Key, key, err)
		}
	})
}

// FuzzKeyJSON: rendering arbitrary bytes as a key never panics and yields
// valid JSON when it succeeds.
func FuzzKeyJSON(f *testing.F) {
	f.Add([]byte("s\x05north"), []byte("s\x02d1"))
	f.Add([]byte("n\x0242"), []byte("b\x04true"))
	p := compile(f, decodeSpecUnit("ms"))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		out, err := p.AppendKeyJSON(nil, append(a, b...))
		if err == nil && !json.Valid(out) {
			t.Fatalf("invalid JSON %q", out)
		}
	})
}

func TestKeyLongerThanTheLimitIsADeadLetter(t *testing.T) {
	p, err := operators.CompileYAML("t", []byte(`name: t
source: {mqtt: {topic: "a/#"}}
event_time: {field: ts}
key: [device]
window: {tumbling: 1s}
aggregates: {n: count()}
`))
	if err != nil {
		t.Fatal(err)
	}
	d, r := p.NewDecoder(), p.NewRecord()
	// The encoded key is 's', a 2-byte uvarint length and the string.
	fits := strings.Repeat("k", operators.MaxKeyBytes-3)
	if err := d.Decode([]byte(`{"ts":1,"device":"`+fits+`"}`), "a/b", r); err != nil || len(r.Key) != operators.MaxKeyBytes {
		t.Fatalf("key of %d bytes: %v", len(r.Key), err)
	}
	err = d.Decode([]byte(`{"ts":1,"device":"`+fits+`x"}`), "a/b", r)
	if !errors.Is(err, operators.ErrBadRecord) || !strings.Contains(err.Error(), "key of 4097 bytes") {
		t.Fatalf("one byte more: %v", err)
	}
}
