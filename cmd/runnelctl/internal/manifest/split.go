package manifest

import (
	"bytes"
	"strings"
)

// chunk is one document's lines of a file: lines[first-1 : last] (1-based
// line numbers), ending in their line breaks.
type chunk struct {
	first int // line of the first line, 1-based
	lines []string
}

// text is the chunk as a YAML text of its own whose line numbers are the
// file's: first-1 empty lines, then the chunk's lines, its --- line
// empty too when nothing but a comment follows the marker and no
// directive precedes it (so that the
// same document sent from a file of its own or after another differs
// only in leading empty lines).
func (c chunk) text() []byte {
	var b bytes.Buffer
	for range c.first - 1 {
		b.WriteByte('\n')
	}
	marker := true // no content before: a --- here is the document's
	for _, l := range c.lines {
		if strings.HasPrefix(l, "%") {
			marker = false // a directive needs its ---
		}
		if marker && isMarker(l, "---") {
			if rest := strings.TrimLeft(strings.TrimPrefix(l, "---"), " \t\r\n"); rest == "" || rest[0] == '#' {
				if strings.HasSuffix(l, "\n") {
					b.WriteByte('\n')
				}
				marker = false
				continue
			}
		}
		if !blankOrComment(l) {
			marker = false
		}
		b.WriteString(l)
	}
	return b.Bytes()
}

// last is the line number of the chunk's last line.
func (c chunk) last() int { return c.first + len(c.lines) - 1 }

// splitDocuments cuts data into one chunk per YAML document. YAML forbids
// a line that starts with "---" or "..." followed by a space, a tab or
// the end of the line inside any content (c-forbidden), so such lines are
// document markers wherever they are, and cutting there before parsing
// gives each document its own lines. A "---" starts a new chunk unless the
// current one holds only blank lines, comments and directives, which then
// belong to the document the marker starts; a "..." ends the current one.
func splitDocuments(data []byte) []chunk {
	var out []chunk
	cur := chunk{first: 1}
	content := false // cur holds a line of content
	line := 1
	flush := func(next int) {
		if len(cur.lines) > 0 {
			out = append(out, cur)
		}
		cur = chunk{first: next}
		content = false
	}
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		var l string
		if i < 0 {
			l, data = string(data), nil
		} else {
			l, data = string(data[:i+1]), data[i+1:]
		}
		switch {
		case isMarker(l, "---"):
			if content {
				flush(line)
			}
			cur.lines = append(cur.lines, l)
			content = true
		case isMarker(l, "..."):
			cur.lines = append(cur.lines, l)
			flush(line + 1)
		default:
			cur.lines = append(cur.lines, l)
			if !blankOrComment(l) {
				content = true
			}
		}
		line++
	}
	flush(line)
	return out
}

// isMarker reports whether line is the document marker m ("---" or
// "..."), alone or followed by whitespace.
func isMarker(line, m string) bool {
	rest, ok := strings.CutPrefix(line, m)
	return ok && (rest == "" || rest[0] == ' ' || rest[0] == '\t' || rest[0] == '\r' || rest[0] == '\n')
}

// blankOrComment reports whether line holds no content: only spaces, a
// comment, or a directive (%YAML, %TAG, which precede a document).
func blankOrComment(line string) bool {
	t := strings.TrimLeft(line, " \t")
	return t == "" || t[0] == '#' || t[0] == '\r' || t[0] == '\n' || line[0] == '%'
}
