package jsonfield

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// MaxDepth is the deepest nesting of objects and arrays Extract accepts;
// the top-level object is depth 1. Deeper documents are rejected with a
// *SyntaxError, which bounds the scanner's recursion.
const MaxDepth = 256

// Extractor pulls a fixed list of dotted paths ("device", "meta.site") out
// of JSON documents. It is not safe for concurrent use, because it owns the
// scratch buffer that unescaped strings live in; give each goroutine its own
// (Clone is cheap: the path trie is shared, read-only).
type Extractor struct {
	paths []string
	nodes []node // nodes[0] is the root: the top-level object
	s     scanner
}

// node is one object level of the path trie. A node can be both a wanted
// value (out >= 0, e.g. "meta") and the parent of wanted values
// ("meta.site").
type node struct {
	out  int     // index into paths/out, or -1
	kids []child // in path order
	// index replaces the scan over kids when there are many of them.
	index map[string]int32
	// sub lists every out index at or below this node. When the key that
	// leads here repeats, the later value replaces the earlier one whole
	// (last wins, like encoding/json), so these are reset first.
	sub []int
}

// child is one key of a node. head (see keyHead) tells most document keys
// apart, or matches them outright, in one integer compare.
type child struct {
	head uint64
	name string
	node int32
}

// indexOver is the child count above which lookup uses a map instead of a
// scan of the heads, which wins for the handful of keys a pipeline usually
// wants at one level.
const indexOver = 8

// keyHead computes child.head for key: its first seven bytes, and its
// length (capped at 255) in the top byte. Keys of up to seven bytes are
// wholly in the head; longer ones also need a string compare.
func keyHead(key []byte) uint64 {
	var h uint64
	if cap(key) >= 8 {
		// key aliases a larger buffer (the document, or the key scratch
		// buffer): load eight bytes at once and drop those past the key.
		h = binary.LittleEndian.Uint64(key[:8])
		if len(key) < 8 {
			h &= 1<<(8*len(key)) - 1
		}
	} else {
		for j := min(len(key), 8) - 1; j >= 0; j-- {
			h = h<<8 | uint64(key[j])
		}
	}
	return h&(1<<56-1) | uint64(min(len(key), 255))<<56
}

// lookupShort returns the child node for a key shorter than eight bytes
// given as its keyHead, or -1. No name compare is needed: the head holds
// the whole key.
// The caller uses lookup instead when n.index is set.
func (n *node) lookupShort(head uint64) int32 {
	for j := range n.kids {
		if n.kids[j].head == head {
			return n.kids[j].node
		}
	}
	return -1
}

// lookup returns the child node for key, or -1.
func (n *node) lookup(key []byte) int32 {
	if n.index != nil {
		if k, ok := n.index[string(key)]; ok {
			return k
		}
		return -1
	}
	if len(n.kids) == 0 {
		return -1
	}
	h := keyHead(key)
	for j := range n.kids {
		c := &n.kids[j]
		if c.head == h && (len(key) <= 7 || c.name == string(key)) {
			return c.node
		}
	}
	return -1
}

// New builds an Extractor for paths. A path is object keys joined by dots;
// keys are compared byte for byte with the unescaped document keys. New
// reports every bad path at once (each error wraps ErrPath): an empty path,
// an empty segment ("a..b", ".a", "a."), or a path listed twice. An empty
// list is allowed: the Extractor then only validates documents.
func New(paths []string) (*Extractor, error) {
	e := &Extractor{
		paths: append([]string(nil), paths...),
		nodes: []node{{out: -1}},
	}
	var errs []error
	seen := make(map[string]int, len(paths))
	for i, p := range paths {
		if p == "" {
			errs = append(errs, fmt.Errorf("%w: path %d is empty", ErrPath, i))
			continue
		}
		if strings.HasPrefix(p, ".") || strings.HasSuffix(p, ".") || strings.Contains(p, "..") {
			errs = append(errs, fmt.Errorf("%w: path %d %q has an empty segment", ErrPath, i, p))
			continue
		}
		if j, dup := seen[p]; dup {
			errs = append(errs, fmt.Errorf("%w: path %d %q repeats path %d", ErrPath, i, p, j))
			continue
		}
		seen[p] = i
		e.insert(p, i)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	for i := range e.nodes {
		n := &e.nodes[i]
		if len(n.kids) > indexOver {
			n.index = make(map[string]int32, len(n.kids))
			for _, c := range n.kids {
				n.index[c.name] = c.node
			}
		}
	}
	e.s.nodes = e.nodes
	return e, nil
}

func (e *Extractor) insert(path string, out int) {
	cur := int32(0)
	e.nodes[0].sub = append(e.nodes[0].sub, out)
	for seg := range strings.SplitSeq(path, ".") {
		next := int32(-1)
		for _, c := range e.nodes[cur].kids {
			if c.name == seg {
				next = c.node
				break
			}
		}
		if next < 0 {
			next = int32(len(e.nodes))
			e.nodes = append(e.nodes, node{out: -1})
			e.nodes[cur].kids = append(e.nodes[cur].kids, child{head: keyHead([]byte(seg)), name: seg, node: next})
		}
		cur = next
		e.nodes[cur].sub = append(e.nodes[cur].sub, out)
	}
	e.nodes[cur].out = out
}

// Paths returns a copy of the paths, in the order Extract fills out.
func (e *Extractor) Paths() []string { return append([]string(nil), e.paths...) }

// Clone returns an Extractor for the same paths with its own scratch
// buffer, for use on another goroutine.
func (e *Extractor) Clone() *Extractor {
	c := &Extractor{paths: e.paths, nodes: e.nodes}
	c.s.nodes = c.nodes
	return c
}

// Extract validates doc and fills out[i] with the value at Paths()[i];
// len(out) must equal the number of paths. Fields not present, or under a
// value that is not an object, get Kind Missing. When a key repeats, its
// last occurrence wins. The top-level value must be an object.
//
// Any error is a *SyntaxError matching ErrSyntax (except a wrong len(out)),
// and then every out[i] is reset to Missing, so a malformed document is never
// half used even when the wanted fields came before the damage.
//
// The values alias doc and the Extractor's scratch buffer: they are valid
// until the next Extract call, and doc must not change meanwhile.
func (e *Extractor) Extract(doc []byte, out []Value) error {
	if len(out) != len(e.paths) {
		return fmt.Errorf(msgOutLen, len(out), len(e.paths))
	}
	clear(out)
	s := &e.s
	s.doc, s.out, s.err = doc, out, nil
	s.scratch = s.scratch[:0]
	end := s.document()
	s.doc, s.out = nil, nil // do not pin the caller's buffers
	if end < 0 {
		clear(out)
		return s.err
	}
	return nil
}
