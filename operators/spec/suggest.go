package spec

import "github.com/runnel-io/runnel/internal/typo"

// suggest is the spec's "did you mean" hint.
func suggest(word string, options []string) string { return typo.Suggest(word, options) }
