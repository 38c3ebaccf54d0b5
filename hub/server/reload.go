package server

import (
	"crypto/sha256"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TokensReload is what a reload of the edge tokens changed.
type TokensReload struct {
	Edges                   int // edges with a token now
	Added, Removed, Changed int // edges whose token came, went or changed
	StreamsEnded            int // open streams of the tokens that went or changed
}

// ReloadEdgeTokens takes the edge tokens read gives (edge id -> token) in
// place of the ones the server had: a token added lets its edge in at
// once, and a token removed or changed ends the open streams that
// presented it (Unauthenticated), whose edge then cannot come back with
// it; a stream an edge opened with its certificate alone stays. When read
// fails, or what it read is refused (two edges with one token, the API
// token among them), nothing changes. Counted in
// runnel_hub_edge_tokens_reloads_total{result}.
func (s *Server) ReloadEdgeTokens(read func() (map[string]string, error)) (TokensReload, error) {
	var r TokensReload
	edges, err := read()
	if err == nil {
		var before map[string][sha256.Size]byte
		if before, err = s.tokens.setEdges(edges); err == nil {
			now := s.tokens.edgeSums()
			r.Edges = len(now)
			for id, sum := range now {
				switch old, ok := before[id]; {
				case !ok:
					r.Added++
				case old != sum:
					r.Changed++
				}
			}
			for id := range before {
				if _, ok := now[id]; !ok {
					r.Removed++
				}
			}
			r.StreamsEnded = s.edgeStreams.revoke(now)
		}
	}
	if err != nil {
		s.metrics.tokenReloads.WithLabelValues("failed").Inc()
		return r, err
	}
	s.metrics.tokenReloads.WithLabelValues("ok").Inc()
	return r, nil
}

var errRevoked = status.Error(codes.Unauthenticated, "hub: this stream's edge token was revoked (the hub reloaded its edge tokens)")

// edgeStreams are the open uplink and control streams with the edge and
// the sum of the token each presented, so that a reload of the edge
// tokens ends those of tokens revoked.
type edgeStreams struct {
	mu sync.Mutex
	m  map[edgeStream]presented
}

// presented is what a stream authenticated with: its edge's token (sum)
// or, token false, a client certificate alone.
type presented struct {
	edge  string
	token bool
	sum   [sha256.Size]byte
}

func (e *edgeStreams) add(st edgeStream, p presented) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m == nil {
		e.m = map[edgeStream]presented{}
	}
	e.m[st] = p
}

func (e *edgeStreams) remove(st edgeStream) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.m, st)
}

// revoke ends the streams whose token is not their edge's in tokens (edge
// id -> sum) any more; it returns how many.
func (e *edgeStreams) revoke(tokens map[string][sha256.Size]byte) int {
	e.mu.Lock()
	var ended []edgeStream
	for st, p := range e.m {
		if p.token && tokens[p.edge] != p.sum {
			ended = append(ended, st)
		}
	}
	e.mu.Unlock()
	for _, st := range ended {
		st.End(errRevoked) // its Closed removes it
	}
	return len(ended)
}
