package operators_test

import (
	"strings"
	"testing"

	"github.com/runnel-io/runnel/examples"
	"github.com/runnel-io/runnel/operators"
)

func TestCompatible(t *testing.T) {
	base := string(examples.LineTemps)
	compile := func(src string) *operators.Pipeline {
		t.Helper()
		p, err := operators.CompileYAML("test", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	prev := compile(base)
	for _, c := range []struct {
		name, old, new string
		ok             bool
	}{
		{"same", "", "", true},
		{"lateness", "allowed_lateness: 30s", "allowed_lateness: 2m", true},
		{"out of order", "max_out_of_order: 5s", "max_out_of_order: 9s", true},
		{"window", "tumbling: 1m", "tumbling: 2m", false},
		{"aggregate", "count()", "sum(temp)", false},
		{"key", "key: [device]", "key: [line]", false},
	} {
		src := base
		if c.old != "" {
			if !strings.Contains(base, c.old) {
				t.Fatalf("%s: the example has no %q", c.name, c.old)
			}
			src = strings.Replace(base, c.old, c.new, 1)
		}
		ok, reason := operators.Compatible(prev, compile(src))
		if ok != c.ok || ok != (reason == "") {
			t.Errorf("%s: Compatible = %v %q, want %v", c.name, ok, reason, c.ok)
		}
	}
}
