package edgecert

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// ErrNoEdgeID is matched (errors.Is) by EdgeID's error for a certificate
// whose Common Name is not an edge id.
var ErrNoEdgeID = errors.New("edgecert: the certificate's subject CN is not an edge id")

// ErrWrongEdge is matched by Check's error for a certificate of another
// edge than the one it is for.
var ErrWrongEdge = errors.New("edgecert: the certificate is another edge's")

// ErrNotClient is matched by Check's error for a certificate whose
// extended key usages exclude client authentication.
var ErrNotClient = errors.New("edgecert: the certificate is not for client authentication")

var idRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// EdgeID returns the edge id cert names: its subject's Common Name. It
// does not verify cert; the caller's TLS stack does.
func EdgeID(cert *x509.Certificate) (string, error) {
	cn := cert.Subject.CommonName
	if !idRE.MatchString(cn) {
		return "", fmt.Errorf("%w: CN %q (an edge id is 1 to 64 letters, digits, '.', '_' or '-')", ErrNoEdgeID, cn)
	}
	return cn, nil
}

// Check reports whether leaf may be edge's client certificate: it names
// edge, and its extended key usages (if it lists any) include client
// authentication. It does not look at the validity period (see Expiry).
func Check(leaf *x509.Certificate, edge string) error {
	id, err := EdgeID(leaf)
	if err != nil {
		return err
	}
	if id != edge {
		return fmt.Errorf("%w: its subject CN is %q, and this edge is %q", ErrWrongEdge, id, edge)
	}
	if len(leaf.ExtKeyUsage) > 0 && !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageClientAuth) && !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageAny) {
		return fmt.Errorf("%w: its extended key usages do not include clientAuth", ErrNotClient)
	}
	return nil
}

// Expiry describes leaf's validity at now: "" while valid, else why not.
func Expiry(leaf *x509.Certificate, now time.Time) string {
	switch {
	case now.After(leaf.NotAfter):
		return fmt.Sprintf("expired at %s", leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		return fmt.Sprintf("not valid before %s", leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	return ""
}

// Pair parses a PEM certificate (chain) and its private key.
func Pair(certPEM, keyPEM []byte) (tls.Certificate, error) {
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return c, errors.New(strings.TrimPrefix(err.Error(), "tls: "))
	}
	if c.Leaf == nil {
		if c.Leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return c, err
		}
	}
	return c, nil
}

// Files is an edge's client certificate and key files, for
// tls.Config.GetClientCertificate. Safe for concurrent use.
type Files struct {
	certFile, keyFile, edge string
	lg                      *slog.Logger

	mu       sync.Mutex
	cur      *tls.Certificate
	stamp    stamp // of the files cur came from
	badStamp stamp // of the files last refused, so a refusal is logged once
}

// stamp is what tells a renewed file: size and modification time of both.
type stamp [2]struct {
	size int64
	mod  time.Time
}

// Load reads the pair for edge, which must be its certificate (Check).
// An expired certificate loads, with a warning on lg (nil: slog.Default).
func Load(certFile, keyFile, edge string, lg *slog.Logger) (*Files, error) {
	if lg == nil {
		lg = slog.Default()
	}
	f := &Files{certFile: certFile, keyFile: keyFile, edge: edge, lg: lg}
	st, err := f.stat()
	if err != nil {
		return nil, err
	}
	c, err := f.load()
	if err != nil {
		return nil, err
	}
	f.cur, f.stamp = c, st
	return f, nil
}

func (f *Files) stat() (stamp, error) {
	var s stamp
	for i, p := range []string{f.certFile, f.keyFile} {
		fi, err := os.Stat(p)
		if err != nil {
			return s, fmt.Errorf("edgecert: %w", err)
		}
		s[i].size, s[i].mod = fi.Size(), fi.ModTime()
	}
	return s, nil
}

func (f *Files) load() (*tls.Certificate, error) {
	certPEM, err := os.ReadFile(f.certFile)
	if err != nil {
		return nil, fmt.Errorf("edgecert: %w", err)
	}
	keyPEM, err := os.ReadFile(f.keyFile)
	if err != nil {
		return nil, fmt.Errorf("edgecert: %w", err)
	}
	c, err := Pair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("edgecert: %s and %s are not a certificate and its key: %v", f.certFile, f.keyFile, err)
	}
	if err := Check(c.Leaf, f.edge); err != nil {
		return nil, fmt.Errorf("%s: %w", f.certFile, err)
	}
	if why := Expiry(c.Leaf, time.Now()); why != "" {
		f.lg.Warn("uplink: the TLS client certificate is "+why+"; the hub will refuse it until it is renewed", "cert_file", f.certFile)
	}
	return &c, nil
}

// Certificate returns the pair in use, loading the files again first if
// they changed since. A change that does not load is logged (once) and
// the previous pair stays in use.
func (f *Files) Certificate() *tls.Certificate {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, err := f.stat()
	if err != nil || st == f.stamp {
		if err != nil && st != f.badStamp {
			f.badStamp = st
			f.lg.Warn("uplink: cannot look at the TLS client certificate files; using the one loaded before", "err", err)
		}
		return f.cur
	}
	c, err := f.load()
	if err != nil {
		if st != f.badStamp {
			f.badStamp = st
			f.lg.Error("uplink: the renewed TLS client certificate does not load; using the one loaded before", "err", err)
		}
		return f.cur
	}
	if !bytes.Equal(c.Certificate[0], f.cur.Certificate[0]) {
		f.lg.Info("uplink: TLS client certificate reloaded", "cert_file", f.certFile,
			"not_after", c.Leaf.NotAfter.UTC().Format(time.RFC3339), "serial", c.Leaf.SerialNumber.String())
	}
	f.cur, f.stamp, f.badStamp = c, st, stamp{}
	return c
}

// GetClientCertificate is tls.Config.GetClientCertificate: the pair in
// use, whatever the server asks for (the hub's CA decides).
func (f *Files) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return f.Certificate(), nil
}
