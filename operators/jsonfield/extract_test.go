package jsonfield

import (
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// sensorDoc is the typical payload the edge decodes.
const sensorDoc = `{"device":"d-0042","ts":1700000000123,"temp":21.57,"meta":{"site":"north","fw":"1.2.3"},"tags":["a","b"]}`

// want is a compact expected Value: "" means Missing, otherwise the kind
// name, a colon and Raw, e.g. "number:21.57".
func show(v Value) string {
	if v.Kind == Missing {
		if v.Raw != nil {
			return "missing with raw!"
		}
		return ""
	}
	return v.Kind.String() + ":" + string(v.Raw)
}

func TestExtract(t *testing.T) {
	many := make([]string, 12)
	var manyDoc strings.Builder
	manyDoc.WriteString(`{`)
	for i := range many {
		many[i] = "k" + strings.Repeat("x", i)
		manyDoc.WriteString(`"` + many[i] + `":` + string(rune('0'+i%10)) + `,`)
	}
	manyDoc.WriteString(`"zz":0}`)
	manyWant := make([]string, len(many))
	for i := range many {
		manyWant[i] = "number:" + string(rune('0'+i%10))
	}

	tests := []struct {
		name  string
		paths []string
		doc   string
		want  []string
	}{
		{"sensor", []string{"device", "ts", "temp", "meta.site", "meta.fw", "tags", "nope", "meta.nope"}, sensorDoc,
			[]string{"string:d-0042", "number:1700000000123", "number:21.57", "string:north", "string:1.2.3", `array:["a","b"]`, "", ""}},
		{"object and inside it", []string{"meta", "meta.site"}, sensorDoc,
			[]string{`object:{"site":"north","fw":"1.2.3"}`, "string:north"}},
		{"deep", []string{"a.b.c", "a.b", "a.x.c"}, `{"a":{"x":1,"b":{"c":[true]}}}`,
			[]string{"array:[true]", `object:{"c":[true]}`, ""}},
		{"literals", []string{"t", "f", "n"}, `{"t":true,"f":false,"n":null}`,
			[]string{"bool:true", "bool:false", "null:null"}},
		{"empty object", []string{"a", "a.b"}, `{}`, []string{"", ""}},
		{"empty values", []string{"s", "o", "a"}, `{"s":"","o":{},"a":[]}`, []string{"string:", "object:{}", "array:[]"}},
		{"whitespace everywhere", []string{"a", "b", "b.c"}, " \t\r\n{ \"a\" :\t[ 1 , 2 ]\n,\r\"b\" : { \"c\" : -1.5e+3 } } \n",
			[]string{"array:[ 1 , 2 ]", `object:{ "c" : -1.5e+3 }`, "number:-1.5e+3"}},
		{"duplicate last wins", []string{"a"}, `{"a":1,"b":0,"a":"two"}`, []string{"string:two"}},
		{"duplicate nested", []string{"m.a"}, `{"m":{"a":1,"a":3}}`, []string{"number:3"}},
		{"duplicate replaces subtree", []string{"m.a", "m.b", "m"}, `{"m":{"a":1},"m":{"b":2}}`,
			[]string{"", "number:2", `object:{"b":2}`}},
		{"duplicate replaced by scalar", []string{"m.a", "m"}, `{"m":{"a":1},"m":5}`, []string{"", "number:5"}},
		{"duplicate after unwanted object", []string{"m.a"}, `{"m":{"a":1},"m":{"z":{"a":2}}}`, []string{""}},
		{"through array", []string{"a.b", "a"}, `{"a":[{"b":1}]}`, []string{"", `array:[{"b":1}]`}},
		{"through scalars", []string{"n.x", "s.x", "z.x", "t.x"}, `{"n":5,"s":"x","z":null,"t":true}`,
			[]string{"", "", "", ""}},
		{"key prefixes do not match", []string{"device", "dev"}, `{"devices":1,"devic":2,"dev":3}`,
			[]string{"", "number:3"}},
		{"same key deeper is not top level", []string{"site"}, sensorDoc, []string{""}},
		{"escapes", []string{"a", "b", "c", "d", "e"},
			`{"a":"caf\u00e9","b":"\ud83d\ude00","c":"l1\nl2\t\"q\"\\\/","d":"\b\f\r","e":"\u0041\u00DF"}`,
			[]string{"string:café", "string:😀", "string:l1\nl2\t\"q\"\\/", "string:\b\f\r", "string:Aß"}},
		{"lone surrogates", []string{"a", "b", "c", "d"},
			`{"a":"\ud800","b":"x\ud800\u0041","c":"\udc00\ud800","d":"\ud800\ud800\udc00"}`,
			[]string{"string:\uFFFD", "string:x\uFFFDA", "string:\uFFFD\uFFFD", "string:\uFFFD\U00010000"}},
		{"raw UTF-8", []string{"é", "a"}, `{"é":"ü€😀","a":"\u00e9"}`, []string{"string:ü€😀", "string:é"}},
		{"escaped keys", []string{"device", `a"b`, "m.é"}, `{"\u0064evice":"x","a\"b":1,"\u006d":{"\u00e9":2}}`,
			[]string{"string:x", "number:1", "number:2"}},
		{"numbers", []string{"a", "b", "c", "d", "e"}, `{"a":-0,"b":1e-7,"c":1E+30,"d":12345678901234567890,"e":0.5}`,
			[]string{"number:-0", "number:1e-7", "number:1E+30", "number:12345678901234567890", "number:0.5"}},
		{"raw does not unescape objects", []string{"o"}, `{"o":{"k":"\n"}}`, []string{`object:{"k":"\n"}`}},
		{"many keys use the index", many, manyDoc.String(), manyWant},
		{"no paths validates only", nil, sensorDoc, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := New(tt.paths)
			if err != nil {
				t.Fatal(err)
			}
			out := make([]Value, len(tt.paths))
			for round := range 2 { // the second round reuses the scratch buffer
				if err := e.Extract([]byte(tt.doc), out); err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				for i, p := range tt.paths {
					if got := show(out[i]); got != tt.want[i] {
						t.Errorf("round %d: path %q = %q, want %q", round, p, got, tt.want[i])
					}
				}
			}
		})
	}
}

func TestExtractErrors(t *testing.T) {
	deep := `{"a":` + strings.Repeat("[", 300)
	deepObj := strings.Repeat(`{"a":`, 300)
	tests := []struct {
		name   string
		doc    string
		offset int
		msg    string
	}{
		{"empty", "", 0, msgEOF},
		{"only space", " \n\t", 3, msgEOF},
		{"open brace", "{", 1, msgEOF},
		{"key then end", `{"a"`, 4, msgEOF},
		{"unterminated key", `{"ab`, 4, msgEOF},
		{"unterminated value", `{"a":"x`, 7, msgEOF},
		{"colon then end", `{"a":`, 5, msgEOF},
		{"value then end", `{"a":1`, 6, msgEOF},
		{"comma then end", `{"a":1,`, 7, msgEOF},
		{"array then end", `{"a":[1`, 7, msgEOF},
		{"missing colon", `{"a" 1}`, 5, "invalid character '1' after object key"},
		{"missing value", `{"a":}`, 5, "invalid character '}' looking for beginning of value"},
		{"trailing comma object", `{"a":1,}`, 7, "invalid character '}' looking for beginning of object key string"},
		{"missing comma", `{"a":1 "b":2}`, 7, `invalid character '"' after object key:value pair`},
		{"missing comma array", `{"a":[1 2]}`, 8, "invalid character '2' after array element"},
		{"trailing comma array", `{"a":[1,]}`, 8, "invalid character ']' looking for beginning of value"},
		{"unquoted key", `{a:1}`, 1, "invalid character 'a' looking for beginning of object key string"},
		{"single quotes", `{'a':1}`, 1, `invalid character '\'' looking for beginning of object key string`},
		{"bad literal", `{"a":tru}`, 8, "invalid character '}' in literal true (expecting 'e')"},
		{"bad literal false", `{"a":fals`, 9, msgEOF},
		{"short literal", `{"a":nul`, 8, msgEOF},
		{"capital literal", `{"a":True}`, 5, "invalid character 'T' looking for beginning of value"},
		{"leading zero", `{"a":01}`, 6, "invalid character '1' after object key:value pair"},
		{"bare minus", `{"a":-}`, 6, "invalid character '}' in numeric literal"},
		{"minus letter", `{"a":-x}`, 6, "invalid character 'x' in numeric literal"},
		{"plus sign", `{"a":+1}`, 5, "invalid character '+' looking for beginning of value"},
		{"bare point", `{"a":1.}`, 7, "invalid character '}' after decimal point in numeric literal"},
		{"point first", `{"a":.5}`, 5, "invalid character '.' looking for beginning of value"},
		{"bare exponent", `{"a":1e}`, 7, "invalid character '}' in exponent of numeric literal"},
		{"exponent sign only", `{"a":1e+}`, 8, "invalid character '}' in exponent of numeric literal"},
		{"hex number", `{"a":0x1}`, 6, "invalid character 'x' after object key:value pair"},
		{"NaN", `{"a":NaN}`, 5, "invalid character 'N' looking for beginning of value"},
		{"bad escape", `{"a":"x\qy"}`, 8, "invalid character 'q' in string escape code"},
		{"bad hex escape", `{"a":"\u12g4"}`, 10, `invalid character 'g' in \u hexadecimal character escape`},
		{"short hex escape", `{"a":"\u12`, 10, msgEOF},
		{"escape at end", `{"a":"\`, 7, msgEOF},
		{"control char", "{\"a\":\"x\ny\"}", 7, `invalid character '\n' in string literal`},
		{"control char in key", "{\"\x01\":1}", 2, `invalid character '\x01' in string literal`},
		{"invalid UTF-8 value", "{\"a\":\"ok\xff\"}", 8, msgUTF8},
		{"invalid UTF-8 skipped key", "{\"\xc3\x28\":1,\"a\":2}", 2, msgUTF8},
		{"UTF-8 surrogate bytes", "{\"a\":\"\xed\xa0\x80\"}", 6, msgUTF8},
		{"overlong UTF-8", "{\"a\":\"\xc0\xaf\"}", 6, msgUTF8},
		{"truncated UTF-8", "{\"a\":\"\xe2\x82", 8, msgEOF},
		{"long string with bad byte", `{"a":"` + strings.Repeat("x", 20) + "\xff" + `"}`, 26, msgUTF8},
		{"non-ASCII outside string", `{"a":é}`, 5, "invalid character 'é' looking for beginning of value"},
		{"bad byte outside string", "{\"a\":\xff}", 5, "invalid byte 0xff looking for beginning of value"},
		{"BOM", "\xef\xbb\xbf{}", 0, "invalid character '\\ufeff' looking for beginning of value"},
		{"after top level", `{"a":1}x`, 7, "invalid character 'x' after top-level value"},
		{"two objects", `{"a":1} {}`, 8, "invalid character '{' after top-level value"},
		{"comment", `{"a":1 /* c */}`, 7, "invalid character '/' after object key:value pair"},
		{"top-level array", ` [1]`, 1, msgNotObj + "array"},
		{"top-level string", `"x"`, 0, msgNotObj + "string"},
		{"top-level number", `12`, 0, msgNotObj + "number"},
		{"top-level null", `null`, 0, msgNotObj + "null"},
		{"top-level broken array", `[1,`, 3, msgEOF},
		{"top-level junk", `x`, 0, "invalid character 'x' looking for beginning of value"},
		{"top-level number then junk", "0\u0089", 1, "invalid character '\\u0089' after top-level value"},
		{"top-level array then junk", `[1] x`, 4, "invalid character 'x' after top-level value"},
		{"too deep array", deep, 5 + MaxDepth - 1, msgDepth},
		{"too deep object", deepObj, 5 * MaxDepth, msgDepth},
		{"damage after the wanted fields", `{"device":"d","ts":1,"x":[1,}`, 28, "invalid character '}' looking for beginning of value"},
	}
	e, err := New([]string{"a", "device", "ts"})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]Value, 3)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := e.Extract([]byte(tt.doc), out)
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("err = %v, want a *SyntaxError", err)
			}
			if !errors.Is(err, ErrSyntax) {
				t.Errorf("errors.Is(%v, ErrSyntax) = false", err)
			}
			if se.Offset != tt.offset || se.Msg != tt.msg {
				t.Errorf("got offset %d %q, want offset %d %q", se.Offset, se.Msg, tt.offset, tt.msg)
			}
			for i, v := range out {
				if v.Kind != Missing || v.Raw != nil {
					t.Errorf("out[%d] = %v after an error, want Missing", i, v)
				}
			}
		})
	}
}

func TestDepthLimit(t *testing.T) {
	e, _ := New([]string{"a"})
	out := make([]Value, 1)
	// MaxDepth levels are fine, wanted or not.
	ok := strings.Repeat(`{"a":`, MaxDepth-1) + "[]" + strings.Repeat("}", MaxDepth-1)
	if err := e.Extract([]byte(ok), out); err != nil {
		t.Fatalf("depth %d: %v", MaxDepth, err)
	}
	ok = `{"b":` + strings.Repeat("[", MaxDepth-1) + strings.Repeat("]", MaxDepth-1) + "}"
	if err := e.Extract([]byte(ok), out); err != nil {
		t.Fatalf("depth %d: %v", MaxDepth, err)
	}
	// A million brackets fail fast, without growing the stack.
	bomb := `{"b":` + strings.Repeat("[", 1<<20)
	if err := e.Extract([]byte(bomb), out); !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), msgDepth) {
		t.Fatalf("bomb: %v", err)
	}
}

// TestLinear checks that long strings, many keys and many escapes are
// handled in one pass: a quadratic scanner would take minutes here.
func TestLinear(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"s":"` + strings.Repeat("abcdefgh", 1<<17) + `",`)
	b.WriteString(`"e":"` + strings.Repeat(`\u00e9\n`, 1<<15) + `",`)
	for i := range 1 << 15 {
		b.WriteString(`"k`)
		b.WriteString(strings.Repeat("x", i%7))
		b.WriteString(`":[1,"v",{"k":null}],`)
		b.WriteString(`"\u0064":` + "1,") // repeated wanted key with an escape
	}
	b.WriteString(`"d":2}`)
	e, _ := New([]string{"s", "e", "d", "kxx"})
	out := make([]Value, 4)
	for range 3 {
		if err := e.Extract([]byte(b.String()), out); err != nil {
			t.Fatal(err)
		}
	}
	if len(out[0].Raw) != 8<<17 || len(out[1].Raw) != 3<<15 || show(out[2]) != "number:2" ||
		show(out[3]) != `array:[1,"v",{"k":null}]` {
		t.Fatalf("unexpected values: %d %d %s %s", len(out[0].Raw), len(out[1].Raw), show(out[2]), show(out[3]))
	}
}

func TestNew(t *testing.T) {
	tests := []struct {
		paths []string
		bad   []string // fragments expected in the error, one per bad path
	}{
		{[]string{"a", "a.b", "b"}, nil},
		{[]string{""}, []string{"path 0 is empty"}},
		{[]string{"a..b"}, []string{`"a..b" has an empty segment`}},
		{[]string{".a", "a."}, []string{`".a"`, `"a."`}},
		{[]string{"a", "b", "a"}, []string{`path 2 "a" repeats path 0`}},
		{[]string{"ok", "", "x..y", "ok"}, []string{"path 1 is empty", `"x..y"`, `path 3 "ok" repeats path 0`}},
	}
	for _, tt := range tests {
		e, err := New(tt.paths)
		if tt.bad == nil {
			if err != nil {
				t.Errorf("New(%q): %v", tt.paths, err)
			}
			continue
		}
		if e != nil || !errors.Is(err, ErrPath) {
			t.Errorf("New(%q) = %v, %v; want ErrPath", tt.paths, e, err)
			continue
		}
		for _, frag := range tt.bad {
			if !strings.Contains(err.Error(), frag) {
				t.Errorf("New(%q) error %q lacks %q", tt.paths, err, frag)
			}
		}
	}
}

func TestPathsAndClone(t *testing.T) {
	paths := []string{"device", "meta.site"}
	e, _ := New(paths)
	paths[0] = "changed" // New copied its input
	got := e.Paths()
	if got[0] != "device" || got[1] != "meta.site" {
		t.Fatalf("Paths() = %q", got)
	}
	got[0] = "changed" // and Paths returns a copy
	c := e.Clone()
	out1, out2 := make([]Value, 2), make([]Value, 2)
	if err := e.Extract([]byte(`{"device":"\u0041"}`), out1); err != nil {
		t.Fatal(err)
	}
	// The clone has its own scratch buffer: using it leaves out1 intact.
	if err := c.Extract([]byte(`{"device":"\u0042","meta":{"site":"s"}}`), out2); err != nil {
		t.Fatal(err)
	}
	if show(out1[0]) != "string:A" || show(out2[0]) != "string:B" || show(out2[1]) != "string:s" {
		t.Fatalf("got %q %q %q", show(out1[0]), show(out2[0]), show(out2[1]))
	}
	if c.Paths()[0] != "device" {
		t.Fatal("clone paths")
	}
}

func TestExtractOutLength(t *testing.T) {
	e, _ := New([]string{"a", "b"})
	err := e.Extract([]byte(`{}`), make([]Value, 1))
	if err == nil || errors.Is(err, ErrSyntax) {
		t.Fatalf("err = %v, want a usage error", err)
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{Missing: "missing", Null: "null", Bool: "bool", Number: "number",
		String: "string", Object: "object", Array: "array", Kind(42): "Kind(42)"} {
		if k.String() != want {
			t.Errorf("%d.String() = %q, want %q", k, k.String(), want)
		}
	}
}

func TestSyntaxErrorText(t *testing.T) {
	err := error(&SyntaxError{Offset: 17, Msg: "invalid character 'x' after object key"})
	if got := err.Error(); got != "json: offset 17: invalid character 'x' after object key" {
		t.Fatalf("Error() = %q", got)
	}
	if msgDepth != "nesting depth exceeds 256" || MaxDepth != 256 {
		t.Fatal("msgDepth out of step with MaxDepth")
	}
}

func TestZeroAllocs(t *testing.T) {
	escaped := `{"device":"d-\u00e9\"42\"","ts":1700000000123,"temp":-21.5e0,"meta":{"site":"nor\th","fw":"1.2.3"},"tags":["a","b"]}`
	e, _ := New([]string{"device", "ts", "temp", "meta.site"})
	out := make([]Value, 4)
	for _, doc := range []string{sensorDoc, escaped, string(largeDoc())} {
		b := []byte(doc)
		allocs := testing.AllocsPerRun(100, func() {
			if err := e.Extract(b, out); err != nil {
				t.Fatal(err)
			}
			if _, err := out[2].Float(); err != nil {
				t.Fatal(err)
			}
			if _, err := out[1].Int(); err != nil {
				t.Fatal(err)
			}
			if _, err := out[1].Float(); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%.40s...: %v allocs per Extract, want 0", doc, allocs)
		}
	}
	// The slow path of Float (strconv) does not allocate either.
	hard := Value{Kind: Number, Raw: []byte("3.14159265358979323846264338327950288e-300")}
	if n := testing.AllocsPerRun(100, func() { _, _ = hard.Float() }); n != 0 {
		t.Errorf("Float slow path: %v allocs", n)
	}
}

// TestCloneConcurrent runs clones side by side under -race: they share the
// path trie, which Extract only reads.
func TestCloneConcurrent(t *testing.T) {
	e, _ := New([]string{"device", "ts", "meta.site"})
	var wg sync.WaitGroup
	for w := range 4 {
		c := e.Clone()
		wg.Go(func() {
			out := make([]Value, 3)
			doc := []byte(`{"device":"d\u00e9` + strconv.Itoa(w) + `","ts":1,"meta":{"site":"s"}}`)
			for range 200 {
				if err := c.Extract(doc, out); err != nil {
					t.Error(err)
					return
				}
				if got, want := string(out[0].Raw), "dé"+strconv.Itoa(w); got != want {
					t.Errorf("worker %d: device = %q, want %q", w, got, want)
					return
				}
			}
		})
	}
	wg.Wait()
}
