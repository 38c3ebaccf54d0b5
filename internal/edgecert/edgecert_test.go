package edgecert_test

import (
	"bytes"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runnel-io/runnel/internal/edgecert"
	"github.com/runnel-io/runnel/internal/testcert"
)

func TestEdgeID(t *testing.T) {
	for _, tc := range []struct {
		cn, want string
	}{
		{"gw-001", "gw-001"},
		{"a.b_c-9", "a.b_c-9"},
		{strings.Repeat("x", 64), strings.Repeat("x", 64)},
		{"", ""},
		{strings.Repeat("x", 65), ""},
		{"gw 001", ""},
		{"gw/001", ""},
		{"édge", ""},
	} {
		got, err := edgecert.EdgeID(&x509.Certificate{Subject: pkix.Name{CommonName: tc.cn}})
		if got != tc.want || (tc.want == "") != errors.Is(err, edgecert.ErrNoEdgeID) {
			t.Errorf("EdgeID(CN=%q) = %q, %v; want %q", tc.cn, got, err, tc.want)
		}
	}
}

func TestCheck(t *testing.T) {
	leaf := func(cn string, eku ...x509.ExtKeyUsage) *x509.Certificate {
		return &x509.Certificate{Subject: pkix.Name{CommonName: cn}, ExtKeyUsage: eku}
	}
	for _, tc := range []struct {
		leaf *x509.Certificate
		want error
	}{
		{leaf("gw-1", x509.ExtKeyUsageClientAuth), nil},
		{leaf("gw-1"), nil},
		{leaf("gw-1", x509.ExtKeyUsageAny), nil},
		{leaf("gw-1", x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth), nil},
		{leaf("gw-1", x509.ExtKeyUsageServerAuth), edgecert.ErrNotClient},
		{leaf("gw-2", x509.ExtKeyUsageClientAuth), edgecert.ErrWrongEdge},
		{leaf("not an id"), edgecert.ErrNoEdgeID},
	} {
		if err := edgecert.Check(tc.leaf, "gw-1"); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("Check(CN=%s, %v): %v, want %v", tc.leaf.Subject.CommonName, tc.leaf.ExtKeyUsage, err, tc.want)
		}
	}
}

// TestFilesReload: a renewed pair is used from the next handshake on; a
// renewal that does not load, or names another edge, leaves the previous
// one in use and is logged once.
func TestFilesReload(t *testing.T) {
	dir := t.TempDir()
	ca, err := testcert.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(name, cn string) (cert, key []byte) {
		c, k, err := testcert.WriteClient(ca, dir, name, testcert.Client{CommonName: cn})
		if err != nil {
			t.Fatal(err)
		}
		cert, _ = os.ReadFile(c)
		key, _ = os.ReadFile(k)
		return cert, key
	}
	certFile, keyFile := filepath.Join(dir, "edge.pem"), filepath.Join(dir, "edge.key")
	install := func(cert, key []byte) {
		t.Helper()
		// A renewal writes new files; make sure the stamp moves even on a
		// coarse clock.
		later := time.Now().Add(time.Second)
		for p, b := range map[string][]byte{certFile: cert, keyFile: key} {
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(p, later, later); err != nil {
				t.Fatal(err)
			}
		}
	}
	c1, k1 := issue("one", "gw-1")
	install(c1, k1)
	var logs bytes.Buffer
	f, err := edgecert.Load(certFile, keyFile, "gw-1", slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	first := f.Certificate().Leaf.SerialNumber

	c2, k2 := issue("two", "gw-1")
	install(c2, k2)
	got, _ := f.GetClientCertificate(nil)
	if got.Leaf.SerialNumber.Cmp(first) == 0 {
		t.Fatal("the renewed certificate was not loaded")
	}
	second := got.Leaf.SerialNumber
	if !strings.Contains(logs.String(), "reloaded") {
		t.Errorf("no log of the reload: %s", logs.String())
	}

	for _, bad := range []struct {
		name      string
		cert, key []byte
		log       string
	}{
		{"half written", c2[:len(c2)/2], k2, "does not load"},
		{"key of another certificate", c1, k2, "does not load"},
		{"another edge's", nil, nil, "another edge"},
	} {
		if bad.cert == nil {
			bad.cert, bad.key = issue("other", "gw-2")
		}
		logs.Reset()
		install(bad.cert, bad.key)
		for range 3 {
			if got := f.Certificate(); got.Leaf.SerialNumber.Cmp(second) != 0 {
				t.Fatalf("%s: the pair in use changed to serial %v", bad.name, got.Leaf.SerialNumber)
			}
		}
		if n := strings.Count(logs.String(), bad.log); n != 1 {
			t.Errorf("%s: logged %d times, want once: %s", bad.name, n, logs.String())
		}
	}

	if _, err := edgecert.Load(certFile, keyFile, "gw-1", nil); !errors.Is(err, edgecert.ErrWrongEdge) {
		t.Errorf("Load of another edge's certificate: %v", err)
	}
	if _, err := edgecert.Load(filepath.Join(dir, "missing.pem"), keyFile, "gw-1", nil); err == nil {
		t.Error("Load of a missing file succeeded")
	}
}

func TestExpiry(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := &x509.Certificate{NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour)}
	if got := edgecert.Expiry(c, now); got != "" {
		t.Errorf("valid: %q", got)
	}
	if got := edgecert.Expiry(c, now.Add(2*time.Hour)); !strings.HasPrefix(got, "expired at 2030-01-01T01:00:00Z") {
		t.Errorf("expired: %q", got)
	}
	if got := edgecert.Expiry(c, now.Add(-2*time.Hour)); !strings.HasPrefix(got, "not valid before") {
		t.Errorf("not yet valid: %q", got)
	}
}
