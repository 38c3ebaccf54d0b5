package operators

import (
	"errors"
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
//
// It does not stop at the first bad file, so that a user fixes every spec
// in one round trip: the error joins (errors.Join), in the order of the
// files, each file's own error, which is spec.Problems for a spec that
// does not parse or compile and an I/O error for a file that cannot be
// read, and a spec.Problem at the name of each pipeline named like an
// earlier one. errors.Is(err, spec.ErrInvalid) holds when any spec is
// invalid. On error no pipeline is returned.
func LoadFiles(globs []string) ([]*Pipeline, error) {
	var (
		ps     []*Pipeline
		errs   []error
		names  = map[string]string{} // pipeline name -> file
		globOf = map[string]string{} // file -> the glob that named it first
	)
	for _, g := range globs {
		paths, err := filepath.Glob(g)
		if err != nil || len(paths) == 0 {
			paths = []string{g}
		}
		for _, path := range paths {
			if first, dup := globOf[path]; dup {
				// Overlapping globs (pipelines/*.yaml and
				// pipelines/a.yaml): the same spec twice would be
				// refused below as two pipelines of one name.
				msg := "listed twice; list each file once"
				if first != g {
					msg = "named by both " + first + " and " + g + "; list each file once"
				}
				errs = append(errs, spec.Problem{File: path, Msg: msg})
				continue
			}
			globOf[path] = g
			s, err := spec.Load(path)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			p, err := Compile(s)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if other, dup := names[p.Name]; dup {
				errs = append(errs, s.Problemf(s.Where("name"), "name", "%q is also the name of %s; pipelines are kept by name, so each needs its own", p.Name, other))
				continue
			}
			names[p.Name] = path
			ps = append(ps, p)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return ps, nil
}
