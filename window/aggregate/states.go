package aggregate

import "unsafe"

// States is n partials of one Set side by side, for callers that keep many
// of them (the window operator's per-slice slabs): the record count and
// scalar slots of partial i are one run of a single []float64, so reaching a
// partial touches one place in memory, and walking them streams through it.
// The zero States holds none.
type States struct {
	vals   []float64   // partial i is vals[i*stride : (i+1)*stride]
	sk     []*sketches // partial i's sketches; nil unless the Set has sketches
	stride int
}

// NewStates returns n empty partials. It allocates.
func (s *Set) NewStates(n int) States {
	w := len(s.zero)
	ss := States{vals: make([]float64, n*w), stride: w}
	for i := range n {
		copy(ss.vals[i*w:], s.zero)
	}
	if s.nHLL > 0 || s.nQuant > 0 {
		ss.sk = make([]*sketches, n)
		for i := range ss.sk {
			ss.sk[i] = s.newSketches()
		}
	}
	return ss
}

// GrowStates makes ss hold n partials, keeping the ones it holds (moved to
// new memory: States taken with At before stay valid but no longer alias
// ss) and adding empty ones. It allocates; n below ss.Len() does nothing.
func (s *Set) GrowStates(ss *States, n int) {
	old := ss.Len()
	if n <= old {
		return
	}
	w := len(s.zero)
	vals := make([]float64, n*w)
	copy(vals, ss.vals)
	for i := old; i < n; i++ {
		copy(vals[i*w:], s.zero)
	}
	ss.vals, ss.stride = vals, w
	if s.nHLL > 0 || s.nQuant > 0 {
		sk := make([]*sketches, n)
		copy(sk, ss.sk)
		for i := old; i < n; i++ {
			sk[i] = s.newSketches()
		}
		ss.sk = sk
	}
}

// Len returns the number of partials.
func (ss *States) Len() int {
	if ss.stride == 0 {
		return 0
	}
	return len(ss.vals) / ss.stride
}

// At returns partial i as a State that shares its memory: what is done to
// the State is done to the partial. The State stays valid as long as ss.
func (ss *States) At(i int) State {
	w := ss.stride
	st := State{vals: ss.vals[i*w : (i+1)*w : (i+1)*w]}
	if ss.sk != nil {
		st.sk = ss.sk[i]
	}
	return st
}

// Lines returns the addresses of the first and last words of partial i,
// the cache lines it lies on, for window.Operator.AddRecords to request
// ahead of adding to it.
func (ss *States) Lines(i int) (first, last uintptr) {
	w := ss.stride
	v := ss.vals[i*w : (i+1)*w]
	return uintptr(unsafe.Pointer(&v[0])), uintptr(unsafe.Pointer(&v[w-1]))
}
