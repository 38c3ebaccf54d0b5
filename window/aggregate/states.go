package aggregate

// NewStates returns n empty States whose scalar slots share one allocation,
// for callers that keep many partials side by side (the window operator's
// per-slice slabs): walking them then streams through memory. It allocates.
func (s *Set) NewStates(n int) []State {
	sts := make([]State, n)
	w := len(s.zero)
	vals := make([]float64, n*w)
	for i := range sts {
		v := vals[i*w : (i+1)*w : (i+1)*w]
		copy(v, s.zero)
		if s.nHLL > 0 || s.nQuant > 0 {
			sts[i] = *s.New()
		}
		sts[i].vals = v
	}
	return sts
}

// Touch reads st's memory and returns a value of no meaning. The window
// operator calls it to pull partials into cache ahead of Add; see
// window.Operator.Prefetch.
func (s *Set) Touch(st *State) uint64 {
	if len(st.vals) == 0 {
		return st.records
	}
	return st.records + uint64(st.vals[0])
}
