package selector

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Limits of label keys and values, as Kubernetes has them.
const (
	// MaxNameLen bounds a key's name part and a value.
	MaxNameLen = 63
	// MaxPrefixLen bounds a key's prefix (a DNS subdomain).
	MaxPrefixLen = 253
)

// ValidateKey checks a label key: "[prefix/]name" where name is at most
// 63 characters of [A-Za-z0-9._-] that begin and end with a letter or
// digit, and prefix is a DNS subdomain (lower-case RFC 1123 labels
// joined by dots, at most 253 characters). The error says what is wrong.
func ValidateKey(k string) error {
	name := k
	if i := strings.IndexByte(k, '/'); i >= 0 {
		prefix := k[:i]
		name = k[i+1:]
		if strings.IndexByte(name, '/') >= 0 {
			return fmt.Errorf("label key %q has more than one \"/\" (write prefix/name)", k)
		}
		if prefix == "" {
			return fmt.Errorf("label key %q: the prefix before \"/\" is empty", k)
		}
		if err := validatePrefix(prefix); err != nil {
			return fmt.Errorf("label key %q: prefix %w", k, err)
		}
	}
	if name == "" {
		return fmt.Errorf("label key %q: the name is empty", k)
	}
	if err := validateName(name); err != nil {
		return fmt.Errorf("label key %q: name %w", k, err)
	}
	return nil
}

// ValidateValue checks a label value: empty, or at most 63 characters of
// [A-Za-z0-9._-] that begin and end with a letter or digit.
func ValidateValue(v string) error {
	if v == "" {
		return nil
	}
	if err := validateName(v); err != nil {
		return fmt.Errorf("label value %q: %w", v, err)
	}
	return nil
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// validateName checks a name part or a value (non-empty).
func validateName(s string) error {
	if len(s) > MaxNameLen {
		return fmt.Errorf("is %d characters, at most %d", len(s), MaxNameLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isAlnum(c) && c != '-' && c != '_' && c != '.' {
			return fmt.Errorf("has %s at position %d: use letters, digits, '-', '_' and '.'", charText(c), i+1)
		}
	}
	if !isAlnum(s[0]) || !isAlnum(s[len(s)-1]) {
		return fmt.Errorf("must begin and end with a letter or digit")
	}
	return nil
}

// validatePrefix checks a DNS subdomain (non-empty).
func validatePrefix(s string) error {
	if len(s) > MaxPrefixLen {
		return fmt.Errorf("is %d characters, at most %d", len(s), MaxPrefixLen)
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" {
			return fmt.Errorf("%q has an empty part between dots", s)
		}
		if len(label) > 63 {
			return fmt.Errorf("%q has a part of %d characters, at most 63", s, len(label))
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
				return fmt.Errorf("%q has %s: a DNS subdomain has lower-case letters, digits, '-' and '.'", s, charText(c))
			}
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("%q: each part must begin and end with a letter or digit", s)
		}
	}
	return nil
}

// charText names a byte of a key or value for an error.
func charText(c byte) string {
	if c >= utf8.RuneSelf {
		return "a non-ASCII character"
	}
	return fmt.Sprintf("%q", rune(c))
}
