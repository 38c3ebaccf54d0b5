package jsonfield

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// fuzzPaths are looked up in every fuzzed document, unless the input names
// its own (comma separated).
var fuzzPaths = []string{"device", "ts", "temp", "meta", "meta.site", "tags", "a", "a.b", "a.b.c", "b", "é", "", "x.y"}

var extractSeeds = []struct{ doc, paths string }{
	{sensorDoc, ""},
	{`{"device":"d-\u00e9\"42\"","ts":1700000000123,"temp":-21.5e0,"meta":{"site":"nor\th","fw":"1.2.3"},"tags":["a","b"]}`, ""},
	{string(largeDoc()), "device,ts,temp,meta.site,meta.geo.lat,readings,labels.zone"},
	{`{"a":{"b":{"c":[1,{"d":null}]}},"a":{"b":{"c":true}}}`, ""},
	{`{"m":{"a":1},"m":{"b":2},"m":[]}`, "m,m.a,m.b"},
	{`{"a":"\ud800","b":"\ud83d\ude00","c":"\udc00\ud800x","é":"\u00e9"}`, ""},
	{`{"\u0061":{"\u0062":1},"a\"b":2}`, "a.b,a\"b"},
	{`{"a":-0,"b":1e-7,"c":1E+30,"d":12345678901234567890,"e":1e400,"f":0.1e-400}`, "a,b,c,d,e,f"},
	{" \t\n\r{ \"a\" : [ 1 , 2 ] , \"b\" : { } } \n", ""},
	{`{}`, ""},
	{`[1,2]`, ""},
	{`"str"`, ""},
	{`{"a":1}x`, ""},
	{`{"a":[1,]}`, ""},
	{`{"a":"x` + "\xff" + `"}`, ""},
	{`{"a":"x` + "\xed\xa0\x80" + `"}`, ""},
	{`{"a":` + strings.Repeat("[", 300) + strings.Repeat("]", 300) + `}`, ""},
	{`{"a":01}`, ""},
	{`{"a":tru}`, ""},
	{`{"a":"\u12G4"}`, ""},
	{`{"kkkkkkkk":1,"kkkkkkk":2,"kkkkkkkkk":3}`, "kkkkkkk,kkkkkkkk,kkkkkkkkk"},
	{`{"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"long-key-0123456789":10}`,
		"k1,k2,k3,k4,k5,k6,k7,k8,k9,long-key-0123456789,k10"},
}

// FuzzExtract checks Extract against encoding/json, the oracle. For UTF-8
// input (Extract rejects invalid UTF-8, encoding/json replaces it): Extract
// succeeds exactly when json.Valid holds and the top level is an object,
// except past MaxDepth; its syntax error offsets match encoding/json's; and
// every extracted value equals what json.Unmarshal finds at that path.
func FuzzExtract(f *testing.F) {
	for _, s := range extractSeeds {
		f.Add([]byte(s.doc), s.paths)
	}
	f.Fuzz(func(t *testing.T, doc []byte, pathSpec string) {
		paths := fuzzPaths[:len(fuzzPaths)-2] // "" would make New fail
		if pathSpec != "" {
			if _, err := New(strings.Split(pathSpec, ",")); err == nil {
				paths = strings.Split(pathSpec, ",")
			}
		}
		e, err := New(paths)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]Value, len(paths))
		err = e.Extract(doc, out)

		var se *SyntaxError
		if err != nil {
			if !errors.As(err, &se) || !errors.Is(err, ErrSyntax) {
				t.Fatalf("error %v (%T) is not a *SyntaxError", err, err)
			}
			if se.Offset < 0 || se.Offset > len(doc) {
				t.Fatalf("offset %d outside [0, %d]", se.Offset, len(doc))
			}
			for i := range out {
				if out[i].Kind != Missing || out[i].Raw != nil {
					t.Fatalf("out[%d] = %v after error", i, out[i])
				}
			}
		}
		if !utf8.Valid(doc) {
			if err == nil {
				t.Fatalf("accepted invalid UTF-8")
			}
			return
		}
		if se != nil && se.Msg == msgDepth {
			if d := depthAt(doc, se.Offset); d != MaxDepth+1 {
				t.Fatalf("depth error at offset %d, where depth is %d", se.Offset, d)
			}
			return
		}
		valid := json.Valid(doc)
		object := valid && doc[skipSpace(doc, 0)] == '{'
		if se != nil && strings.HasPrefix(se.Msg, msgNotObj) {
			if !valid || object {
				t.Fatalf("%v, but valid=%v object=%v", err, valid, object)
			}
			return
		}
		if (err == nil) != object {
			t.Fatalf("Extract error = %v, json.Valid = %v, object = %v", err, valid, object)
		}
		if err != nil {
			// Same place as encoding/json, whose Offset counts the bad byte.
			var want *json.SyntaxError
			if jerr := json.Unmarshal(doc, new(any)); !errors.As(jerr, &want) {
				t.Fatalf("encoding/json: %v", jerr)
			}
			got := int64(se.Offset) + 1
			if se.Msg == msgEOF {
				got = int64(se.Offset)
			}
			if got != want.Offset {
				t.Fatalf("%v, but encoding/json says %d: %v", err, want.Offset, want)
			}
			return
		}

		dec := json.NewDecoder(bytes.NewReader(doc))
		dec.UseNumber()
		var root any
		if err := dec.Decode(&root); err != nil {
			t.Fatalf("oracle: %v", err)
		}
		for i, p := range paths {
			checkValue(t, p, out[i], lookupPath(root, p))
		}
	})
}

// lookupPath walks the oracle's tree the way paths are defined.
func lookupPath(root any, path string) (v any) {
	v = root
	for seg := range strings.SplitSeq(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return missing{}
		}
		if v, ok = m[seg]; !ok {
			return missing{}
		}
	}
	return v
}

type missing struct{}

func checkValue(t *testing.T, path string, got Value, want any) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("path %q: got %v %q; "+format, append([]any{path, got.Kind, got.Raw}, args...)...)
	}
	switch w := want.(type) {
	case missing:
		if got.Kind != Missing {
			fail("want missing")
		}
	case nil:
		if got.Kind != Null || string(got.Raw) != "null" {
			fail("want null")
		}
	case bool:
		b, err := got.Bool()
		if err != nil || b != w {
			fail("want %v", w)
		}
	case string:
		if got.Kind != String || string(got.Raw) != w {
			fail("want string %q", w)
		}
	case json.Number:
		if got.Kind != Number || string(got.Raw) != string(w) {
			fail("want number %s", w)
		}
		f, err := got.Float()
		wf, werr := strconv.ParseFloat(string(w), 64)
		if math.Float64bits(f) != math.Float64bits(wf) || (err == nil) != (werr == nil) {
			fail("Float() = %v, %v; strconv gives %v, %v", f, err, wf, werr)
		}
	case map[string]any, []any:
		kind := Object
		if _, ok := w.([]any); ok {
			kind = Array
		}
		if got.Kind != kind {
			fail("want %v", kind)
		}
		dec := json.NewDecoder(bytes.NewReader(got.Raw))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil || dec.More() {
			fail("raw does not decode alone: %v", err)
		}
		if !reflect.DeepEqual(v, w) {
			fail("want %v", w)
		}
	default:
		t.Fatalf("oracle gave %T", want)
	}
}

// depthAt is the nesting depth of the container opened at doc[off],
// counted outside strings.
func depthAt(doc []byte, off int) int {
	depth, inString := 0, false
	for i := 0; i <= off && i < len(doc); i++ {
		switch c := doc[i]; {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
		}
	}
	return depth
}

// FuzzNumber checks Float against strconv.ParseFloat and Int against exact
// rational arithmetic, for every string in JSON number grammar.
func FuzzNumber(f *testing.F) {
	for _, s := range []string{"0", "-0", "21.57", "1700000000123", "1.7e12", "1e-7", "1E+30", "9007199254740993",
		"9223372036854775807", "9223372036854775808", "-9223372036854775808", "1e400", "1e-400", "0.1",
		"123456789012345678901234567890e-10", "10.50e1", "4.9406564584124654e-324", "2.2250738585072011e-308",
		"1.00000000000000011102230246251565404236316680908203125", "0e99999", "-", "01", "1.", "+1", "inf"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v := Value{Kind: Number, Raw: []byte(s)}
		f, err := v.Float()
		n, ierr := v.Int()
		if !isJSONNumber(s) {
			if !errors.Is(err, ErrSyntax) || !errors.Is(ierr, ErrSyntax) {
				t.Fatalf("%q is no JSON number, but Float = %v, %v and Int = %v, %v", s, f, err, n, ierr)
			}
			return
		}
		wf, werr := strconv.ParseFloat(s, 64)
		if math.Float64bits(f) != math.Float64bits(wf) || (err == nil) != (werr == nil) {
			t.Fatalf("Float(%s) = %v, %v; strconv gives %v, %v", s, f, err, wf, werr)
		}
		if err != nil && !errors.Is(err, ErrRange) {
			t.Fatalf("Float(%s): %v does not wrap ErrRange", s, err)
		}
		// big.Rat is the oracle for Int, where it is cheap: a huge
		// exponent would make it build a huge integer.
		if exp := strings.IndexAny(s, "eE"); exp >= 0 {
			if e, err := strconv.Atoi(s[exp+1:]); err != nil || e > 400 || e < -400 {
				return
			}
		}
		r, ok := new(big.Rat).SetString(s)
		if !ok {
			t.Fatalf("big.Rat rejects %q", s)
		}
		switch {
		case !r.IsInt():
			if !errors.Is(ierr, ErrNotInteger) {
				t.Fatalf("Int(%s) = %d, %v; want ErrNotInteger", s, n, ierr)
			}
		case !r.Num().IsInt64():
			if !errors.Is(ierr, ErrRange) {
				t.Fatalf("Int(%s) = %d, %v; want ErrRange", s, n, ierr)
			}
		default:
			if ierr != nil || n != r.Num().Int64() {
				t.Fatalf("Int(%s) = %d, %v; want %d", s, n, ierr, r.Num().Int64())
			}
		}
	})
}

// isJSONNumber is an independent check of the grammar, through
// encoding/json.
func isJSONNumber(s string) bool {
	if s == "" || (s[0] != '-' && (s[0] < '0' || s[0] > '9')) || strings.TrimRight(s, " \t\r\n") != s {
		return false
	}
	var n json.Number
	return json.Unmarshal([]byte(s), &n) == nil
}
