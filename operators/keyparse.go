package operators

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// KeyFromStrings encodes a key given as text, one value per key field
// (an API query such as ?key[device]=d1), in the encoding the Decoder
// gives Record.Key, so that it selects the same key:
//
//   - a value that is a JSON number (21, -1.5e3) is a number, stored in
//     the shortest form that reads back as the same float64 (strconv 'g',
//     -1), as the Decoder does: 21.0 and 21 are one key;
//   - true and false are bools;
//   - a value in double quotes ("21", "true") is the string between them,
//     which is how a string that looks like a number or bool is given;
//   - anything else is the string as written.
//
// Every key field must be given and no other; the error lists every field
// missing and every one unknown.
func (p *Pipeline) KeyFromStrings(fields map[string]string) ([]byte, error) {
	var missing, unknown []string
	known := make(map[string]bool, len(p.keyFields))
	for _, f := range p.keyFields {
		name := p.fieldNames[f]
		known[name] = true
		if _, ok := fields[name]; !ok {
			missing = append(missing, name)
		}
	}
	for name := range fields {
		if !known[name] {
			unknown = append(unknown, name)
		}
	}
	if len(missing) > 0 || len(unknown) > 0 {
		slices.Sort(unknown)
		var parts []string
		if len(missing) > 0 {
			parts = append(parts, "missing key fields "+strings.Join(missing, ", "))
		}
		if len(unknown) > 0 {
			parts = append(parts, "unknown key fields "+strings.Join(unknown, ", "))
		}
		return nil, fmt.Errorf("operators: %s: %s (the key is %s)", p.Name, strings.Join(parts, "; "), strings.Join(p.KeyFields(), ", "))
	}
	var key []byte
	for _, f := range p.keyFields {
		name := p.fieldNames[f]
		s := fields[name]
		switch {
		case isJSONNumber([]byte(s)):
			x, err := strconv.ParseFloat(s, 64)
			if err != nil || math.IsInf(x, 0) {
				return nil, fmt.Errorf("operators: %s: key field %s: %q is out of the float64 range", p.Name, name, s)
			}
			key = append(key, 'n', 0)
			start := len(key)
			key = strconv.AppendFloat(key, x, 'g', -1, 64)
			key[start-1] = byte(len(key) - start) // at most 24 bytes: one uvarint byte
		case s == "true" || s == "false":
			key = append(key, 'b', byte(len(s)))
			key = append(key, s...)
		default:
			if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
				s = s[1 : len(s)-1]
			}
			key = append(key, 's')
			key = binary.AppendUvarint(key, uint64(len(s)))
			key = append(key, s...)
		}
	}
	return key, nil
}
