package spec

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// maxTopicLen is MQTT's limit on a topic (a UTF-8 string with a 16-bit
// length prefix).
const maxTopicLen = 65535

// checkTopicFilter checks an MQTT subscription filter against the rules of
// MQTT 3.1.1 §4.7 and 5.0 §4.7: "+" must be a whole level, "#" a whole level
// and the last one. It returns the topic's levels.
func checkTopicFilter(topic string) ([]string, error) {
	if err := checkTopicText(topic); err != nil {
		return nil, err
	}
	levels := strings.Split(topic, "/")
	for i, l := range levels {
		switch {
		case l == "+" || l == "#" && i == len(levels)-1:
		case l == "#":
			return nil, fmt.Errorf("%q is not a valid topic filter: # must be the last level (it matches all remaining levels)", topic)
		case strings.ContainsAny(l, "+#"):
			return nil, fmt.Errorf("%q is not a valid topic filter: level %d %q mixes a wildcard with other text; + and # must be a whole level, as in a/+/c or a/#", topic, i, l)
		}
	}
	return levels, nil
}

// checkTopicName checks a topic to publish to: no wildcards.
func checkTopicName(topic string) error {
	if err := checkTopicText(topic); err != nil {
		return err
	}
	if strings.ContainsAny(topic, "+#") {
		return fmt.Errorf("%q cannot be published to: a topic name has no wildcards (+ or #)", topic)
	}
	return nil
}

// topicMatches reports whether a valid filter (given as levels) matches the
// topic name, per MQTT: + matches one level, # any number of levels
// including none (a/# matches a), and wildcards at the start do not match
// topics beginning with $ (such as $SYS).
func topicMatches(filter []string, topic string) bool {
	levels := strings.Split(topic, "/")
	if strings.HasPrefix(topic, "$") && (filter[0] == "+" || filter[0] == "#") {
		return false
	}
	for i, f := range filter {
		switch {
		case f == "#":
			return true
		case i >= len(levels):
			return false
		case f != "+" && f != levels[i]:
			return false
		}
	}
	return len(levels) == len(filter)
}

func checkTopicText(topic string) error {
	switch {
	case topic == "":
		return fmt.Errorf("the topic is empty")
	case len(topic) > maxTopicLen:
		return fmt.Errorf("the topic is %d bytes long; MQTT allows at most %d", len(topic), maxTopicLen)
	case !utf8.ValidString(topic):
		return fmt.Errorf("the topic %q is not valid UTF-8", topic)
	case strings.ContainsRune(topic, 0):
		return fmt.Errorf("the topic %q contains a NUL character", topic)
	}
	return nil
}
