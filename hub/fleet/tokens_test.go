package fleet_test

import (
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/runnel-io/runnel/hub/fleet"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

func TestTokens(t *testing.T) {
	h := newHarness(t, nil)
	resp, err := h.CreateToken("root", "ci", fleet.RoleOperator)
	if err != nil {
		t.Fatal(err)
	}
	secret := resp.Secret
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(secret, fleet.TokenPrefix))
	if !strings.HasPrefix(secret, "rnl_") || err != nil || len(raw) != 32 {
		t.Fatalf("secret %q: want rnl_ and 32 bytes base64url (%v)", secret, err)
	}
	if resp.Token.Name != "ci" || resp.Token.Role != "operator" || resp.Token.CreatedBy != "root" {
		t.Fatalf("token: %v", resp.Token)
	}
	other, _ := h.CreateToken("root", "viewer-1", fleet.RoleViewer)
	for _, c := range []struct {
		secret, name, role string
	}{{secret, "ci", "operator"}, {other.Secret, "viewer-1", "viewer"}} {
		name, role, err := h.Authenticate(c.secret)
		if err != nil || name != c.name || role != c.role {
			t.Errorf("Authenticate(%s) = %q %q %v", c.name, name, role, err)
		}
	}
	for _, bad := range []string{"", "rnl_", secret + "x", secret[:len(secret)-1], strings.ToUpper(secret)} {
		if _, _, err := h.Authenticate(bad); !errors.Is(err, fleet.ErrNotFound) {
			t.Errorf("Authenticate(%q): %v", bad, err)
		}
	}
	// Refusals change nothing.
	before := snapshot(t, h.Fleet)
	if _, err := h.CreateToken("root", "ci", fleet.RoleAdmin); !errors.Is(err, fleet.ErrExists) {
		t.Errorf("a second ci: %v", err)
	}
	if _, err := h.CreateToken("root", "x", "god"); !errors.Is(err, fleet.ErrInvalid) || !strings.Contains(err.Error(), `role "god"`) {
		t.Errorf("role god: %v", err)
	}
	if _, err := h.CreateToken("root", "a b", fleet.RoleViewer); !errors.Is(err, fleet.ErrInvalid) {
		t.Errorf("name a b: %v", err)
	}
	if err := h.RevokeToken("root", "nope"); !errors.Is(err, fleet.ErrNotFound) {
		t.Errorf("revoke nope: %v", err)
	}
	if after := snapshot(t, h.Fleet); after != before {
		t.Errorf("refusals changed the state")
	}
	// The secret is nowhere in the store or the listing.
	h.reopen()
	if name, _, err := h.Authenticate(secret); err != nil || name != "ci" {
		t.Fatalf("after reopen: %q %v", name, err)
	}
	if s := fmt.Sprint(h.ListTokens()); strings.Contains(s, secret) || !strings.Contains(s, "viewer-1") {
		t.Errorf("ListTokens: %s", s)
	}
	h.Close()
	file, err := os.ReadFile(filepath.Join(h.dir, "fleet.db"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(file), secret) || strings.Contains(string(file), secret[len(fleet.TokenPrefix):]) {
		t.Error("the secret is in the store")
	}
	h.open()
	if err := h.RevokeToken("root", "ci"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.Authenticate(secret); !errors.Is(err, fleet.ErrNotFound) {
		t.Errorf("a revoked token authenticates: %v", err)
	}
	var actions []string
	for _, a := range h.Audit(0, 0) {
		actions = append(actions, fmt.Sprintf("%s %s %s→%s by %s", a.Action, a.Object, a.Before, a.After, a.Who))
	}
	want := "token.create token/ci →role operator by root|token.create token/viewer-1 →role viewer by root|token.revoke token/ci role operator→ by root"
	if got := strings.Join(actions, "|"); got != want {
		t.Errorf("audit:\n%s\nwant\n%s", got, want)
	}
}

func TestAuditPaging(t *testing.T) {
	h := newHarness(t, nil)
	for i := range 250 {
		if _, err := h.CreateToken("root", fmt.Sprintf("t%03d", i), fleet.RoleViewer); err != nil {
			t.Fatal(err)
		}
	}
	page := h.Audit(0, 0)
	if len(page) != fleet.DefaultAuditLimit || page[0].Id != 1 || page[99].Id != 100 {
		t.Fatalf("first page: %d entries, %d..", len(page), page[0].Id)
	}
	page = h.Audit(200, 100)
	if len(page) != 50 || page[0].Id != 201 || page[49].Object != "token/t249" {
		t.Fatalf("last page: %d entries from %d", len(page), page[0].Id)
	}
	if page := h.Audit(250, 10); len(page) != 0 {
		t.Fatalf("after the end: %v", page)
	}
	if page := h.Audit(0, 5000); len(page) != 250 {
		t.Fatalf("limit: %d", len(page))
	}
	// Ids go on after a restart.
	h.reopen()
	h.CreateToken("root", "after", fleet.RoleViewer)
	if page := h.Audit(250, 0); len(page) != 1 || page[0].Id != 251 {
		t.Fatalf("after reopen: %v", page)
	}
}

// TestCorruptStore: a record that fails its checksum, a record moved under
// another key, or a layout of another format is refused at Open with
// ErrCorrupt, naming the record.
func TestCorruptStore(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(tx *bolt.Tx) error
		want string
	}{
		{"flipped byte", func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte("edges"))
			v := append([]byte(nil), b.Get([]byte("e1"))...)
			v[len(v)-3] ^= 1
			return b.Put([]byte("e1"), v)
		}, `record "edges"/"e1": CRC mismatch`},
		{"moved", func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte("edges"))
			return b.Put([]byte("e2"), b.Get([]byte("e1")))
		}, `record "edges"/"e2": CRC mismatch`},
		{"version", func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte("pipelines")).Bucket([]byte("temps"))
			v := append([]byte(nil), b.Get([]byte("h"))...)
			v[0] = 9
			return b.Put([]byte("h"), v)
		}, `record "pipelines"/"temps"/"h" has version 9`},
		{"short", func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("tokens")).Put([]byte("x"), []byte{1, 2})
		}, `record "tokens"/"x" of 2 bytes`},
		{"format", func(tx *bolt.Tx) error {
			return tx.DeleteBucket([]byte("meta"))
		}, `bucket "pipelines" without meta`},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.applyPipeline(tempsV1)
			e := newSimEdge("e1", map[string]string{"a": "1"})
			e.connect(t, h.Fleet)
			e.disconnect()
			h.Close()
			h.Fleet = nil
			db, err := bolt.Open(filepath.Join(h.dir, "fleet.db"), 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Update(c.edit); err != nil {
				t.Fatal(err)
			}
			db.Close()
			_, err = fleet.Open(h.dir, h.opts)
			if !errors.Is(err, fleet.ErrCorrupt) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Open: %v, want ErrCorrupt and %q", err, c.want)
			}
		})
	}
}

func TestClosed(t *testing.T) {
	h := newHarness(t, nil)
	h.Close()
	if _, err := h.ApplyPipeline("a", &runnelv1.ApplyPipelineRequest{Spec: tempsV1}); !errors.Is(err, fleet.ErrClosed) {
		t.Errorf("ApplyPipeline after Close: %v", err)
	}
	if err := h.Evaluate(); !errors.Is(err, fleet.ErrClosed) {
		t.Errorf("Evaluate after Close: %v", err)
	}
	if err := h.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	h.Fleet = nil
}
