package mqtt

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// maxTopicLen is the MQTT limit on a topic name or filter, in bytes: it is
// sent as a UTF-8 string with a 16-bit length prefix.
const maxTopicLen = 65535

// sharePrefix starts an MQTT v5 shared subscription filter:
// "$share/{group}/{filter}".
const sharePrefix = "$share/"

// Match reports whether topic matches filter under MQTT's rules: levels are
// separated by '/', '+' matches exactly one level, a trailing '#' matches
// the parent level and any number of levels below it, and topics beginning
// with '$' (like $SYS/...) are not matched by a filter that begins with a
// wildcard. A shared subscription filter ($share/group/f) matches what f
// matches. Match does not validate its arguments: an invalid filter
// matches what its literal text and wildcards say, and callers that take
// filters from users validate them first (ValidateFilter).
func Match(filter, topic string) bool {
	if rest, ok := strings.CutPrefix(filter, sharePrefix); ok {
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			filter = rest[i+1:]
		}
	}
	if len(topic) > 0 && topic[0] == '$' && len(filter) > 0 && (filter[0] == '+' || filter[0] == '#') {
		return false // MQTT-4.7.2-1
	}
	// Walk both level by level without allocating: this runs per message
	// when a source routes topics to pipelines.
	for {
		fl, frest, fmore := strings.Cut(filter, "/")
		if fl == "#" && !fmore {
			return true // matches the parent level too: "a/#" matches "a"
		}
		tl, trest, tmore := strings.Cut(topic, "/")
		if fl != "+" && fl != tl {
			return false
		}
		switch {
		case !fmore && !tmore:
			return true
		case !tmore:
			// Topic exhausted: only a remaining "#" matches ("a/#" vs "a").
			return frest == "#"
		case !fmore:
			return false
		}
		filter, topic = frest, trest
	}
}

// ValidateFilter reports what is wrong with a subscription filter, or nil:
// it must be 1 to 65535 bytes of UTF-8 without NUL; '#' only as the whole
// last level; '+' only as a whole level; a shared subscription
// ($share/group/filter) needs a group without wildcards and a valid filter.
func ValidateFilter(filter string) error {
	if problem := checkFilter(filter); problem != "" {
		return fmt.Errorf("%w: %s", ErrInvalidTopic, problem)
	}
	return nil
}

// checkFilter returns what is wrong with filter, naming it, or "".
func checkFilter(filter string) string {
	if err := validateString(filter); err != nil {
		return fmt.Sprintf("filter %q: %v", filter, err)
	}
	f := filter
	if rest, ok := strings.CutPrefix(filter, sharePrefix); ok {
		group, inner, found := strings.Cut(rest, "/")
		switch {
		case !found || inner == "":
			return fmt.Sprintf("shared filter %q: want $share/{group}/{filter}", filter)
		case group == "" || strings.ContainsAny(group, "+#"):
			return fmt.Sprintf("shared filter %q: group %q must be non-empty without wildcards", filter, group)
		}
		f = inner
	}
	for i := 0; ; i++ {
		level, rest, more := strings.Cut(f, "/")
		switch {
		case strings.Contains(level, "#") && (level != "#" || more):
			return fmt.Sprintf("filter %q: '#' must be the whole last level (level %d is %q)", filter, i, level)
		case strings.Contains(level, "+") && level != "+":
			return fmt.Sprintf("filter %q: '+' must be a whole level (level %d is %q)", filter, i, level)
		}
		if !more {
			return ""
		}
		f = rest
	}
}

// ValidateTopic reports what is wrong with a topic name (as published), or
// nil: 1 to 65535 bytes of UTF-8, no NUL, no wildcards.
func ValidateTopic(topic string) error {
	if err := validateString(topic); err != nil {
		return fmt.Errorf("%w: topic %q: %v", ErrInvalidTopic, topic, err)
	}
	if i := strings.IndexAny(topic, "+#"); i >= 0 {
		return fmt.Errorf("%w: topic %q: wildcard %q at byte %d", ErrInvalidTopic, topic, topic[i], i)
	}
	return nil
}

func validateString(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("empty")
	case len(s) > maxTopicLen:
		return fmt.Errorf("%d bytes, more than %d", len(s), maxTopicLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("not valid UTF-8")
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("NUL at byte %d", strings.IndexByte(s, 0))
	}
	return nil
}
