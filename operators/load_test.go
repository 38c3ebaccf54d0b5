package operators_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runnel-io/runnel/operators"
	"github.com/runnel-io/runnel/operators/spec"
)

func goodSpec(name string) string {
	return "name: " + name + "\nsource: {mqtt: {topic: \"t/+\"}}\nevent_time: {field: ts}\nwindow: {tumbling: 1m}\naggregates: {n: count()}\n"
}

// TestLoadFiles: globs expand in order, a glob without matches is named
// in the error, and two specs with one name are refused.
func TestLoadFiles(t *testing.T) {
	dir := t.TempDir()
	for file, name := range map[string]string{"a.yaml": "a", "b.yaml": "b", "dup.yml": "a"} {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(goodSpec(name)), 0o644); err != nil {
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
	a, dup := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "dup.yml")
	_, err = operators.LoadFiles([]string{a, dup})
	if want := dup + `:1:7: name: "a" is also the name of ` + a; err == nil || err.Error() != want+"; pipelines are kept by name, so each needs its own" || !errors.Is(err, spec.ErrInvalid) {
		t.Errorf("two pipelines named a: %v, want %s...", err, want)
	}
	_, err = operators.LoadFiles([]string{filepath.Join(dir, "*.yaml"), a})
	if want := a + ": named by both " + filepath.Join(dir, "*.yaml") + " and " + a + "; list each file once"; err == nil || err.Error() != want {
		t.Errorf("a file matched twice: %v, want %s", err, want)
	}
}

// TestLoadFilesEveryProblem: LoadFiles does not stop at the first bad
// file; it lists the problems of every file, in the order of the files.
func TestLoadFilesEveryProblem(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"1-syntax.yaml":   goodSpec("one") + "key: [device\n",
		"2-semantic.yaml": strings.Replace(goodSpec("two"), "tumbling: 1m", "tumbling: 0s", 1) + "filtr: x > 1\n",
		"3-good.yaml":     goodSpec("three"),
		"4-dup.yaml":      goodSpec("three"),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	missing := filepath.Join(dir, "0-missing.yaml")
	ps, err := operators.LoadFiles([]string{filepath.Join(dir, "[1-4]-*.yaml"), missing})
	if ps != nil {
		t.Errorf("pipelines returned with an error: %v", ps)
	}
	if !errors.Is(err, spec.ErrInvalid) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("error matches neither spec.ErrInvalid nor fs.ErrNotExist: %v", err)
	}
	f := func(name string) string { return filepath.Join(dir, name) }
	want := []string{
		f("1-syntax.yaml") + `:6:6: invalid YAML: did not find expected ',' or ']' (a [ list is not closed)`,
		f("2-semantic.yaml") + `:4:20: window.tumbling: must be greater than 0`,
		f("2-semantic.yaml") + `:6:1: unknown field "filtr" (did you mean "filter"?)`,
		f("4-dup.yaml") + `:1:7: name: "three" is also the name of ` + f("3-good.yaml") + `; pipelines are kept by name, so each needs its own`,
		"spec: open " + missing + ": no such file or directory",
	}
	if got := strings.Split(err.Error(), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", err, strings.Join(want, "\n"))
	}
}
