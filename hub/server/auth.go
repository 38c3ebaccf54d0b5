package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/runnel-io/runnel/hub/fleet/fleeterr"
	"github.com/runnel-io/runnel/internal/edgecert"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// Full-method prefixes of the services edges call, with an edge token;
// every other method takes an API token (methodRoles).
const (
	uplinkPrefix  = "/runnel.v1.Uplink/"
	controlPrefix = "/runnel.v1.Control/"
	fleetPrefix   = "/runnel.v1.Fleet/"
)

// role is what an API token may do; each role may do what the ones below
// it may.
type role uint8

const (
	roleViewer   role = iota + 1 // read results, health and the fleet's state
	roleOperator                 // change pipelines, deployments and labels
	roleAdmin                    // manage API tokens
)

var roleNames = [...]string{roleViewer: "viewer", roleOperator: "operator", roleAdmin: "admin"}

func (r role) String() string {
	if int(r) < len(roleNames) && roleNames[r] != "" {
		return roleNames[r]
	}
	return fmt.Sprintf("role(%d)", r)
}

// parseRole reads a role name as FleetCore.Authenticate and CreateToken
// carry it.
func parseRole(s string) (role, bool) {
	for r, name := range roleNames {
		if name != "" && name == s {
			return role(r), true
		}
	}
	return 0, false
}

// methodRoles is the role each method of the API needs. A method of
// neither this table nor an edge service is refused (fail closed);
// TestAccessRules checks that every method the server registers is in
// one or the other.
var methodRoles = map[string]role{
	runnelv1.Results_ListPipelines_FullMethodName: roleViewer,
	runnelv1.Results_ListEdges_FullMethodName:     roleViewer,
	runnelv1.Results_QueryResults_FullMethodName:  roleViewer,
	runnelv1.Results_Subscribe_FullMethodName:     roleViewer,
	runnelv1.Health_Check_FullMethodName:          roleViewer,

	runnelv1.Fleet_GetPipeline_FullMethodName:            roleViewer,
	runnelv1.Fleet_ListManagedPipelines_FullMethodName:   roleViewer,
	runnelv1.Fleet_ListRevisions_FullMethodName:          roleViewer,
	runnelv1.Fleet_DiffRevisions_FullMethodName:          roleViewer,
	runnelv1.Fleet_ListFleetEdges_FullMethodName:         roleViewer,
	runnelv1.Fleet_GetFleetEdge_FullMethodName:           roleViewer,
	runnelv1.Fleet_GetDeployment_FullMethodName:          roleViewer,
	runnelv1.Fleet_ListDeployments_FullMethodName:        roleViewer,
	runnelv1.Fleet_ListDeploymentVersions_FullMethodName: roleViewer,
	runnelv1.Fleet_ListAudit_FullMethodName:              roleViewer,

	runnelv1.Fleet_ApplyPipeline_FullMethodName:   roleOperator,
	runnelv1.Fleet_DeletePipeline_FullMethodName:  roleOperator,
	runnelv1.Fleet_LabelEdge_FullMethodName:       roleOperator,
	runnelv1.Fleet_ApplyDeployment_FullMethodName: roleOperator,
	runnelv1.Fleet_Rollout_FullMethodName:         roleOperator,

	runnelv1.Fleet_CreateToken_FullMethodName: roleAdmin,
	runnelv1.Fleet_ListTokens_FullMethodName:  roleAdmin,
	runnelv1.Fleet_RevokeToken_FullMethodName: roleAdmin,
}

// bootstrapName is the caller name of the configured API token in the
// audit log; CreateToken refuses it as a token name.
const bootstrapName = "api"

// tokens decides who calls: bearer tokens and, with client
// authentication on, the edge a verified TLS client certificate names.
// Only SHA-256 sums of tokens are kept; a presented token's sum is looked
// up among the edges' and compared with the API token's in constant
// time, so nothing tells how close a guess was. Tokens created through the Fleet API are the fleet's to check
// (FleetCore.Authenticate, which also keeps sums).
type tokens struct {
	edges      atomic.Pointer[edgeTable] // swapped whole by setEdges
	api        [sha256.Size]byte
	hasAPI     bool
	clientAuth ClientAuth // ClientAuthNone: certificates are not looked at
	fleet      FleetCore  // nil: no fleet; only the configured API token
	log        *slog.Logger
	// refused counts an edge-service call refused, by reason (the
	// runnel_hub_edge_auth_refused_total label); nil: not counted.
	refused func(reason string)
}

type edgeToken struct {
	id  string
	sum [sha256.Size]byte
}

// edgeTable is the edge tokens, also by their sums: a stream's token is
// looked up by its SHA-256, in one map probe whatever the fleet's size
// (comparing it with every edge's took 0.3 ms at 10,000 edges, for anyone
// who opens a stream). The probe's time depends on the sum, which tells
// nothing of how close a guess was.
type edgeTable struct {
	list  []edgeToken
	bySum map[[sha256.Size]byte]string
}

func newTokens(edges map[string]string, api string, fleet FleetCore, log *slog.Logger) (*tokens, error) {
	t := &tokens{fleet: fleet, log: log}
	if api != "" {
		t.api, t.hasAPI = sha256.Sum256([]byte(api)), true
	}
	if _, err := t.setEdges(edges); err != nil {
		return nil, err
	}
	return t, nil
}

// setEdges checks edges (edge id -> token) and, when they are fine, makes
// them the edge tokens; it returns the sums of the tokens before.
func (t *tokens) setEdges(edges map[string]string) (before map[string][sha256.Size]byte, err error) {
	var problems []string
	var list []edgeToken
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
		list = append(list, edgeToken{id: id, sum: sum})
	}
	if _, dup := seen[t.api]; dup && t.hasAPI {
		problems = append(problems, "the API token is also an edge's token")
	}
	if len(problems) > 0 {
		return nil, errors.New(strings.Join(problems, "; "))
	}
	before = map[string][sha256.Size]byte{}
	if old := t.edges.Load(); old != nil {
		for _, e := range old.list {
			before[e.id] = e.sum
		}
	}
	tab := &edgeTable{list: list, bySum: make(map[[sha256.Size]byte]string, len(list))}
	for _, e := range list {
		tab.bySum[e.sum] = e.id
	}
	t.edges.Store(tab)
	return before, nil
}

// edgeSums returns every edge's token sum.
func (t *tokens) edgeSums() map[string][sha256.Size]byte {
	out := map[string][sha256.Size]byte{}
	for _, e := range t.edges.Load().list {
		out[e.id] = e.sum
	}
	return out
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
	errNoToken    = status.Error(codes.Unauthenticated, "missing bearer token: send metadata authorization: Bearer <token>")
	errBadToken   = status.Error(codes.Unauthenticated, "unknown token")
	errEdgeOnAPI  = status.Error(codes.PermissionDenied, "edge tokens call only the uplink and control stream")
	errAPIOnEdge  = status.Error(codes.PermissionDenied, "API tokens call only the Fleet, Results and Health services; the uplink and control stream take an edge's token")
	errNoAPIToken = status.Error(codes.Unauthenticated, "fleet changes need an API token and this hub has none configured: configure auth.api_token (the admin token that creates the others)")
	errNoFleet    = status.Error(codes.Unimplemented, "the hub has no fleet store (fleet.enabled is false, or this build has no control plane)")
	errNoCert     = status.Error(codes.Unauthenticated, "this hub requires edges to present a TLS client certificate (tls.client_auth: require): set the edge's uplink.tls.cert_file and uplink.tls.key_file")
	errCertOnAPI  = status.Error(codes.PermissionDenied, "edge certificates call only the uplink and control stream; call the API over a connection without an edge's client certificate")
)

// Reasons of runnel_hub_edge_auth_refused_total.
const (
	refusedNoCredentials = "no_credentials" // neither a token nor a certificate
	refusedToken         = "token"          // an unknown token, or an API token
	refusedNoCert        = "certificate_required"
	refusedCertNotEdge   = "certificate_not_an_edge" // a verified certificate whose CN is no edge id
	refusedMismatch      = "certificate_token_mismatch"
)

func (t *tokens) refuse(reason string, err error) error {
	if t.refused != nil {
		t.refused(reason)
	}
	return err
}

// certEdge returns the edge the connection's verified TLS client
// certificate names; has is false without one (or with client
// authentication off). A verified certificate that names no edge is
// Unauthenticated.
func (t *tokens) certEdge(ctx context.Context) (id string, has bool, err error) {
	if t.clientAuth == ClientAuthNone {
		return "", false, nil
	}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "", false, nil
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return "", false, nil
	}
	id, err = edgecert.EdgeID(ti.State.VerifiedChains[0][0])
	if err != nil {
		return "", true, status.Errorf(codes.Unauthenticated, "the TLS client certificate names no edge: its subject CN %q is not an edge id (1 to 64 letters, digits, '.', '_' or '-')",
			ti.State.VerifiedChains[0][0].Subject.CommonName)
	}
	return id, true, nil
}

// match looks tok up among the edge tokens (by its sum) and compares it
// with the API token in constant time: the edge whose token it is, or
// whether it is the API token.
func (t *tokens) match(tok string) (edge string, api bool) {
	sum := sha256.Sum256([]byte(tok))
	api = t.hasAPI && subtle.ConstantTimeCompare(sum[:], t.api[:]) == 1
	if id, ok := t.edges.Load().bySum[sum]; ok {
		return id, false
	}
	return "", api
}

// edge returns the id of the edge that calls: the one its verified TLS
// client certificate names, the one its token is of, or, with both, the
// one both are of. Whatever the caller presents is checked: an unknown
// token is Unauthenticated even beside a good certificate, an API token
// PermissionDenied, a certificate and a token of two edges
// PermissionDenied; neither (or, with ClientAuthRequire, no certificate)
// Unauthenticated. The handlers then hold every message to this id.
func (t *tokens) edge(ctx context.Context) (string, error) {
	certID, hasCert, err := t.certEdge(ctx)
	if err != nil {
		return "", t.refuse(refusedCertNotEdge, err)
	}
	if !hasCert && t.clientAuth == ClientAuthRequire {
		return "", t.refuse(refusedNoCert, errNoCert)
	}
	tok := bearer(ctx)
	if tok == "" {
		if hasCert {
			return certID, nil
		}
		return "", t.refuse(refusedNoCredentials, errNoToken)
	}
	id, err := t.tokenEdge(tok)
	if err != nil {
		return "", t.refuse(refusedToken, err)
	}
	if hasCert && id != certID {
		return "", t.refuse(refusedMismatch, status.Errorf(codes.PermissionDenied,
			"the TLS client certificate is edge %s's and the token edge %s's; an edge presents its own of each", certID, id))
	}
	return id, nil
}

// tokenEdge returns the edge whose token tok is. An API token is
// PermissionDenied; an unknown one Unauthenticated.
func (t *tokens) tokenEdge(tok string) (string, error) {
	id, api := t.match(tok)
	switch {
	case id != "":
		return id, nil
	case api:
		return "", errAPIOnEdge
	}
	if t.fleet != nil {
		if _, _, err := t.fleet.Authenticate(tok); err == nil {
			return "", errAPIOnEdge
		}
	}
	return "", errBadToken
}

// caller is who called an API method: the token's name (the audit log's
// who) and role. An anonymous caller (an open read API) has no name.
type caller struct {
	name string
	role role
}

// apiCaller authenticates the API token tok (from the metadata, or an HTTP
// header) for a method that needs role need. With no API token
// configured, a call without a token is an anonymous viewer: reads are
// open and changes refused. A token, when given, is always checked.
func (t *tokens) apiCaller(tok, method string, need role) (caller, error) {
	if tok == "" {
		switch {
		case t.hasAPI:
			return caller{}, errNoToken
		case need > roleViewer:
			return caller{}, errNoAPIToken
		}
		return caller{role: roleViewer}, nil
	}
	edge, api := t.match(tok)
	var c caller
	switch {
	case edge != "":
		return caller{}, errEdgeOnAPI
	case api:
		c = caller{name: bootstrapName, role: roleAdmin}
	case t.fleet == nil:
		return caller{}, errBadToken
	default:
		name, rs, err := t.fleet.Authenticate(tok)
		if errors.Is(err, fleeterr.ErrNotFound) {
			return caller{}, errBadToken
		}
		if err != nil {
			t.log.Error("hub: checking an API token", "method", method, "err", err)
			return caller{}, status.Errorf(codes.Internal, "hub: checking the token: %v", err)
		}
		r, ok := parseRole(rs)
		if !ok {
			t.log.Error("hub: an API token has a role the server does not know", "token", name, "role", rs)
			return caller{}, status.Errorf(codes.PermissionDenied, "token %q has role %q, which this hub does not know", name, rs)
		}
		c = caller{name: name, role: r}
	}
	if c.role < need {
		return caller{}, status.Errorf(codes.PermissionDenied, "token %q (role %s) may not call %s: it needs role %s",
			c.name, c.role, shortMethod(method), need)
	}
	return c, nil
}

// shortMethod is "Fleet.ApplyPipeline" for "/runnel.v1.Fleet/ApplyPipeline".
func shortMethod(full string) string {
	s := strings.TrimPrefix(full, "/runnel.v1.")
	return strings.Replace(s, "/", ".", 1)
}

type (
	edgeKey   struct{}
	callerKey struct{}
)

// edgeOf returns the edge id the interceptor authenticated.
func edgeOf(ctx context.Context) string {
	id, _ := ctx.Value(edgeKey{}).(string)
	return id
}

// callerOf returns the API caller the interceptor authenticated.
func callerOf(ctx context.Context) caller {
	c, _ := ctx.Value(callerKey{}).(caller)
	return c
}

// authorize decides a call by its full method before the handler runs,
// and returns the context the handler gets: with the edge id for the
// edge services (tokens.edge, from the token or the client certificate:
// the handlers check every message's edge id against it), with the
// caller for the rest. A refused call reaches no handler.
func (t *tokens) authorize(ctx context.Context, method string) (context.Context, error) {
	fleetCall := strings.HasPrefix(method, fleetPrefix) || strings.HasPrefix(method, controlPrefix)
	if fleetCall && t.fleet == nil {
		return nil, errNoFleet
	}
	if strings.HasPrefix(method, uplinkPrefix) || strings.HasPrefix(method, controlPrefix) {
		id, err := t.edge(ctx)
		if err != nil {
			return nil, err
		}
		return context.WithValue(ctx, edgeKey{}, id), nil
	}
	need, ok := methodRoles[method]
	if !ok {
		return nil, status.Errorf(codes.PermissionDenied, "hub: %s has no access rule", method)
	}
	// A client certificate is an edge's credential, whatever token comes
	// with it: an edge calls nothing but its own streams.
	if _, hasCert, _ := t.certEdge(ctx); hasCert {
		return nil, errCertOnAPI
	}
	c, err := t.apiCaller(bearer(ctx), method, need)
	if err != nil {
		return nil, err
	}
	return context.WithValue(ctx, callerKey{}, c), nil
}

func (t *tokens) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx, err := t.authorize(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (t *tokens) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, err := t.authorize(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	return handler(srv, &ctxStream{ServerStream: ss, ctx: ctx})
}

type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *ctxStream) Context() context.Context { return s.ctx }
