//go:build amd64 || arm64 || arm

package prefetch

// lines issues a prefetch for each of the n addresses from p on.
//
//go:noescape
func lines(p *uintptr, n int)
