package operators

import (
	"fmt"
	"path/filepath"

	"github.com/runnel-io/runnel/operators/spec"
)

// CompileYAML parses and compiles a spec held in memory; name stands for
// the file in problems.
func CompileYAML(name string, data []byte) (*Pipeline, error) {
	s, err := spec.Parse(name, data)
	if err != nil {
		return nil, err
	}
	return Compile(s)
}

// LoadFiles reads and compiles the spec files that globs name, in order.
// A glob that matches nothing is taken as a path, so that the error names
// it. Two specs with the same name are refused: edges and the hub keep
// state, outputs and results by pipeline name.
func LoadFiles(globs []string) ([]*Pipeline, error) {
	var ps []*Pipeline
	names := map[string]string{}
	for _, g := range globs {
		paths, err := filepath.Glob(g)
		if err != nil || len(paths) == 0 {
			paths = []string{g}
		}
		for _, path := range paths {
			s, err := spec.Load(path)
			if err != nil {
				return nil, err
			}
			p, err := Compile(s)
			if err != nil {
				return nil, err
			}
			if other, dup := names[p.Name]; dup {
				return nil, fmt.Errorf("pipelines %s and %s are both named %q: pipelines are kept by name", other, path, p.Name)
			}
			names[p.Name] = path
			ps = append(ps, p)
		}
	}
	return ps, nil
}
