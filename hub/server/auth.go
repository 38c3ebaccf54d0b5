package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"sort"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// uplinkPrefix is the full-method prefix of the Uplink service, the only
// one edges call; every other method is the read API.
const uplinkPrefix = "/runnel.v1.Uplink/"

// tokens checks bearer tokens. Only SHA-256 sums are kept, and a presented
// token is compared with every edge's sum in constant time, so neither the
// comparison nor the lookup tells how close a guess was or which edge
// matched.
type tokens struct {
	edges  []edgeToken
	api    [sha256.Size]byte
	hasAPI bool
}

type edgeToken struct {
	id  string
	sum [sha256.Size]byte
}

func newTokens(edges map[string]string, api string) (*tokens, error) {
	t := &tokens{}
	var problems []string
	seen := map[[sha256.Size]byte]string{}
	ids := make([]string, 0, len(edges))
	for id := range edges {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		tok := edges[id]
		switch {
		case id == "":
			problems = append(problems, "an edge token has an empty edge id")
			continue
		case tok == "":
			problems = append(problems, fmt.Sprintf("edge %s: empty token", id))
			continue
		}
		sum := sha256.Sum256([]byte(tok))
		if other, dup := seen[sum]; dup {
			problems = append(problems, fmt.Sprintf("edges %s and %s share a token; each edge needs its own", other, id))
			continue
		}
		seen[sum] = id
		t.edges = append(t.edges, edgeToken{id: id, sum: sum})
	}
	if api != "" {
		t.api, t.hasAPI = sha256.Sum256([]byte(api)), true
		if _, dup := seen[t.api]; dup {
			problems = append(problems, "the API token is also an edge's token")
		}
	}
	if len(problems) > 0 {
		return nil, errors.New(strings.Join(problems, "; "))
	}
	return t, nil
}

// bearer returns the token of the authorization metadata, "" if none.
func bearer(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if tok, ok := cutPrefixFold(v, "Bearer "); ok {
			return strings.TrimSpace(tok)
		}
	}
	return ""
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix) {
		return s[len(prefix):], true
	}
	return "", false
}

var (
	errNoToken  = status.Error(codes.Unauthenticated, "missing bearer token: send metadata authorization: Bearer <token>")
	errBadToken = status.Error(codes.Unauthenticated, "unknown token")
)

// edge returns the id of the edge whose token ctx carries.
func (t *tokens) edge(ctx context.Context) (string, error) {
	tok := bearer(ctx)
	if tok == "" {
		return "", errNoToken
	}
	sum := sha256.Sum256([]byte(tok))
	match := -1
	for i := range t.edges {
		if subtle.ConstantTimeCompare(sum[:], t.edges[i].sum[:]) == 1 {
			match = i
		}
	}
	if match < 0 {
		return "", errBadToken
	}
	return t.edges[match].id, nil
}

// read checks the read API token, when one is configured.
func (t *tokens) read(ctx context.Context) error {
	if !t.hasAPI {
		return nil
	}
	return t.readToken(bearer(ctx))
}

func (t *tokens) readToken(tok string) error {
	if !t.hasAPI {
		return nil
	}
	if tok == "" {
		return errNoToken
	}
	sum := sha256.Sum256([]byte(tok))
	if subtle.ConstantTimeCompare(sum[:], t.api[:]) != 1 {
		return errBadToken
	}
	return nil
}

type edgeKey struct{}

// edgeOf returns the edge id the interceptor authenticated.
func edgeOf(ctx context.Context) string {
	id, _ := ctx.Value(edgeKey{}).(string)
	return id
}

func (t *tokens) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if strings.HasPrefix(info.FullMethod, uplinkPrefix) {
		id, err := t.edge(ctx)
		if err != nil {
			return nil, err
		}
		ctx = context.WithValue(ctx, edgeKey{}, id)
	} else if err := t.read(ctx); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (t *tokens) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx := ss.Context()
	if strings.HasPrefix(info.FullMethod, uplinkPrefix) {
		id, err := t.edge(ctx)
		if err != nil {
			return err
		}
		return handler(srv, &ctxStream{ServerStream: ss, ctx: context.WithValue(ctx, edgeKey{}, id)})
	}
	if err := t.read(ctx); err != nil {
		return err
	}
	return handler(srv, ss)
}

type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *ctxStream) Context() context.Context { return s.ctx }
