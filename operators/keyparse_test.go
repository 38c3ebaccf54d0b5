package operators_test

import (
	"bytes"
	"strings"
	"testing"
)

const keySpec = `name: keys
source: {mqtt: {topic: "plant/+/temp"}}
event_time: {field: ts}
key: [site, line, on]
window: {tumbling: 1m}
aggregates: {n: count()}
`

func TestKeyFromStrings(t *testing.T) {
	p := compile(t, keySpec)
	dec, rec := p.NewDecoder(), p.NewRecord()
	for _, tc := range []struct {
		fields map[string]string
		json   string // the payload's key fields, as the Decoder sees them
		render string // AppendKeyJSON of the key
	}{
		{map[string]string{"site": "north", "line": "7", "on": "true"},
			`"site":"north","line":7,"on":true`, `{"site":"north","line":7,"on":true}`},
		{map[string]string{"site": `"7"`, "line": "7.0", "on": `"false"`},
			`"site":"7","line":7.0,"on":"false"`, `{"site":"7","line":7,"on":"false"}`},
		{map[string]string{"site": "", "line": "-1.5e3", "on": "false"},
			`"site":"","line":-1500,"on":false`, `{"site":"","line":-1500,"on":false}`},
		{map[string]string{"site": `dé "q"`, "line": "1e21", "on": "yes"},
			`"site":"dé \"q\"","line":1000000000000000000000,"on":"yes"`, `{"site":"dé \"q\"","line":1e+21,"on":"yes"}`},
		{map[string]string{"site": `"`, "line": "0.1", "on": "True"},
			`"site":"\"","line":0.10,"on":"True"`, `{"site":"\"","line":0.1,"on":"True"}`},
	} {
		key, err := p.KeyFromStrings(tc.fields)
		if err != nil {
			t.Fatalf("%v: %v", tc.fields, err)
		}
		if err := dec.Decode([]byte(`{"ts":1,`+tc.json+`}`), "plant/x/temp", rec); err != nil {
			t.Fatalf("decode %s: %v", tc.json, err)
		}
		if !bytes.Equal(key, rec.Key) {
			t.Errorf("%v: key %q, the Decoder gives %q", tc.fields, key, rec.Key)
		}
		got, err := p.AppendKeyJSON(nil, key)
		if err != nil || string(got) != tc.render {
			t.Errorf("%v: AppendKeyJSON = %s, %v; want %s", tc.fields, got, err, tc.render)
		}
	}
}

func TestKeyFromStringsErrors(t *testing.T) {
	p := compile(t, keySpec)
	for _, tc := range []struct {
		fields map[string]string
		want   []string
	}{
		{map[string]string{"site": "a"}, []string{"missing key fields line, on", "the key is site, line, on"}},
		{map[string]string{"site": "a", "line": "1", "on": "true", "zz": "1", "device": "d"}, []string{"unknown key fields device, zz"}},
		{map[string]string{"sight": "a", "line": "1", "on": "true"}, []string{"missing key fields site", "unknown key fields sight"}},
		{map[string]string{"site": "a", "line": "1e999", "on": "true"}, []string{"line", "out of the float64 range"}},
		{nil, []string{"missing key fields site, line, on"}},
	} {
		_, err := p.KeyFromStrings(tc.fields)
		if err == nil {
			t.Errorf("%v: no error", tc.fields)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: error %q does not mention %q", tc.fields, err, w)
			}
		}
	}
}
