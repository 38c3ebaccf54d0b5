package operators_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runnel-io/runnel/operators"
)

// TestLoadFiles: globs expand in order, a glob without matches is named
// in the error, and two specs with one name are refused.
func TestLoadFiles(t *testing.T) {
	dir := t.TempDir()
	spec := func(name string) string {
		return "name: " + name + "\nsource: {mqtt: {topic: \"t/+\"}}\nevent_time: {field: ts}\nwindow: {tumbling: 1m}\naggregates: {n: count()}\n"
	}
	for file, name := range map[string]string{"a.yaml": "a", "b.yaml": "b", "dup.yml": "a"} {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(spec(name)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ps, err := operators.LoadFiles([]string{filepath.Join(dir, "*.yaml")})
	if err != nil || len(ps) != 2 || ps[0].Name != "a" || ps[1].Name != "b" {
		t.Fatalf("LoadFiles(*.yaml) = %v, %v", ps, err)
	}
	if _, err := operators.LoadFiles([]string{filepath.Join(dir, "nope-*.yaml")}); err == nil || !strings.Contains(err.Error(), "nope-*.yaml") {
		t.Errorf("a glob without matches: %v", err)
	}
	if _, err := operators.LoadFiles([]string{filepath.Join(dir, "a.yaml"), filepath.Join(dir, "dup.yml")}); err == nil || !strings.Contains(err.Error(), `both named "a"`) {
		t.Errorf("two pipelines named a: %v", err)
	}
}
