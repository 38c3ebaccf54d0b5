package settings

import (
	"strings"

	"github.com/runnel-io/runnel/internal/typo"
)

// suggest is the settings' "did you mean" hint.
func suggest(word string, options []string) string { return typo.Suggest(word, options) }

// suggestValue is suggest for the values of an enum, which are also
// often written longer or shorter than they are: "warning" -> "warn".
func suggestValue(word string, options []string) string {
	if s := suggest(word, options); s != "" {
		return s
	}
	lw := strings.ToLower(word)
	for _, o := range options {
		if len(lw) >= 3 && len(o) >= 3 && (strings.HasPrefix(lw, o) || strings.HasPrefix(o, lw)) {
			return o
		}
	}
	return ""
}
