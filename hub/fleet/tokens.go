package fleet

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"regexp"

	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// The roles of API tokens, each allowing what the one before allows.
const (
	RoleViewer   = "viewer"
	RoleOperator = "operator"
	RoleAdmin    = "admin"
)

// TokenPrefix starts every API token secret, so that one found in a log
// or a repository is recognised.
const TokenPrefix = "rnl_"

var tokenNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// CreateToken creates an API token and returns its secret, which is shown
// this once: the store keeps only its SHA-256. The secret is TokenPrefix
// followed by 32 random bytes, base64url. A name in use is refused
// (ErrExists); a bad name or role is ErrInvalid.
func (f *Fleet) CreateToken(who, name, role string) (*runnelv1.CreateTokenResponse, error) {
	if !tokenNameRE.MatchString(name) {
		return nil, fmt.Errorf("fleet: token name %q: use 1 to 64 letters, digits, '.', '_' and '-', starting with a letter or digit: %w", name, ErrInvalid)
	}
	switch role {
	case RoleViewer, RoleOperator, RoleAdmin:
	default:
		return nil, fmt.Errorf("fleet: token %q: role %q: use viewer, operator or admin: %w", name, role, ErrInvalid)
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, fmt.Errorf("fleet: token %q: %w", name, err)
	}
	secret := TokenPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
	sum := sha256.Sum256([]byte(secret))
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.usable(); err != nil {
		return nil, err
	}
	if _, ok := f.tokens[name]; ok {
		return nil, fmt.Errorf("fleet: token %q: %w", name, ErrExists)
	}
	t := &tokenRecord{Name: name, Role: role, CreatedMs: f.nowMs(), CreatedBy: who, Sum: sum[:]}
	c := newChanges()
	f.tokens[name] = t
	c.tokens = append(c.tokens, t)
	f.addAudit(c, who, "token.create", "token/"+name, "", "role "+role)
	if err := f.commit(c); err != nil {
		return nil, err
	}
	return &runnelv1.CreateTokenResponse{Token: t.proto(), Secret: secret}, nil
}

func (t *tokenRecord) proto() *runnelv1.Token {
	return &runnelv1.Token{Name: t.Name, Role: t.Role, CreatedMs: t.CreatedMs, CreatedBy: t.CreatedBy}
}

// ListTokens returns the tokens, sorted by name, without their secrets.
func (f *Fleet) ListTokens() []*runnelv1.Token {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.usable() != nil {
		return nil
	}
	out := make([]*runnelv1.Token, 0, len(f.tokens))
	for _, name := range sortedKeys(f.tokens) {
		out = append(out, f.tokens[name].proto())
	}
	return out
}

// RevokeToken deletes a token; its secret authenticates no more.
func (f *Fleet) RevokeToken(who, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.usable(); err != nil {
		return err
	}
	t := f.tokens[name]
	if t == nil {
		return fmt.Errorf("fleet: token %q: %w", name, ErrNotFound)
	}
	c := newChanges()
	delete(f.tokens, name)
	c.dropToks = append(c.dropToks, name)
	f.addAudit(c, who, "token.revoke", "token/"+name, "role "+t.Role, "")
	return f.commit(c)
}

// Authenticate returns the name and role of the token whose secret is
// given, or ErrNotFound. It compares the secret's SHA-256 with every
// token's in constant time, so that the time taken says nothing of which
// token, or how much of one, matched.
func (f *Fleet) Authenticate(secret string) (name, role string, err error) {
	sum := sha256.Sum256([]byte(secret))
	f.mu.RLock()
	defer f.mu.RUnlock()
	if err := f.usable(); err != nil {
		return "", "", err
	}
	var found *tokenRecord
	for _, t := range f.tokens {
		if subtle.ConstantTimeCompare(sum[:], t.Sum) == 1 {
			found = t
		}
	}
	if found == nil {
		return "", "", fmt.Errorf("fleet: no such API token: %w", ErrNotFound)
	}
	return found.Name, found.Role, nil
}
