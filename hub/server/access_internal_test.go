package server

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc"

	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// TestAccessRules: every method the server registers is an edge method
// or has a role in methodRoles (a method added to a proto without a rule
// would be refused to everyone), and the table gives each method the role
// the API documents.
func TestAccessRules(t *testing.T) {
	descs := []*grpc.ServiceDesc{&runnelv1.Uplink_ServiceDesc, &runnelv1.Control_ServiceDesc, &runnelv1.Results_ServiceDesc,
		&runnelv1.Health_ServiceDesc, &runnelv1.Fleet_ServiceDesc}
	n := 0
	for _, d := range descs {
		var names []string
		for _, m := range d.Methods {
			names = append(names, m.MethodName)
		}
		for _, s := range d.Streams {
			names = append(names, s.StreamName)
		}
		for _, name := range names {
			full := "/" + d.ServiceName + "/" + name
			edge := strings.HasPrefix(full, uplinkPrefix) || strings.HasPrefix(full, controlPrefix)
			_, api := methodRoles[full]
			if edge == api {
				t.Errorf("%s: edge method %v, in methodRoles %v; want exactly one", full, edge, api)
			}
			if api {
				n++
			}
		}
	}
	if n != len(methodRoles) {
		t.Errorf("methodRoles has %d methods, the services %d: a rule for a method that does not exist", len(methodRoles), n)
	}
	want := map[role][]string{
		roleOperator: {"ApplyPipeline", "DeletePipeline", "LabelEdge", "ApplyDeployment", "Rollout"},
		roleAdmin:    {"CreateToken", "ListTokens", "RevokeToken"},
	}
	for full, r := range methodRoles {
		need := roleViewer
		for wr, names := range want {
			for _, name := range names {
				if full == fleetPrefix+name {
					need = wr
				}
			}
		}
		if r != need {
			t.Errorf("%s needs %s, want %s", full, r, need)
		}
	}
	if !(roleViewer < roleOperator && roleOperator < roleAdmin) {
		t.Error("roles are not ordered viewer < operator < admin")
	}
	for _, name := range []string{"viewer", "operator", "admin"} {
		if r, ok := parseRole(name); !ok || r.String() != name {
			t.Errorf("parseRole(%q) = %v, %v", name, r, ok)
		}
	}
	for _, bad := range []string{"", "root", "Admin", "role(0)"} {
		if _, ok := parseRole(bad); ok {
			t.Errorf("parseRole(%q) accepted", bad)
		}
	}
}

// BenchmarkTokenMatch: a stream's token looked up among 10,000 edges'.
func BenchmarkTokenMatch(b *testing.B) {
	edges := map[string]string{}
	for i := range 10_000 {
		edges[fmt.Sprintf("gw-%05d", i)] = fmt.Sprintf("token-of-gw-%05d-0123456789", i)
	}
	t, err := newTokens(edges, "the-api-token-0123456789", nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if id, _ := t.match("token-of-gw-04242-0123456789"); id != "gw-04242" {
			b.Fatal(id)
		}
	}
}
