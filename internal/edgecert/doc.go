// Package edgecert is the identity an edge's TLS client certificate
// carries to the hub, as both sides read it, and the edge's certificate
// files, reloaded when they are renewed.
//
// # Identity
//
// A client certificate names its edge by the subject's Common Name: the
// certificate of edge gw-001 has CN=gw-001 (as `openssl req -subj
// /CN=gw-001`, step-ca, cfssl and cert-manager issue by default, and as
// Kubernetes reads a client certificate's user). Subject alternative
// names are not read: one field, so that a certificate never names two
// edges. The CN must be a valid edge id (1 to 64 letters, digits, '.',
// '_' or '-'); a certificate with another CN names no edge. The hub reads
// the CN only of a certificate its TLS stack verified against
// tls.client_ca_file (chain, validity period, client-authentication key
// usage); EdgeID itself checks nothing of that.
//
// # Files
//
// Files is the edge's side: tls.Config.GetClientCertificate for the
// uplink's connection. Each handshake (one a reconnect) looks at the
// files' size and modification time, and loads them again when either
// changed, so a renewed certificate is used from the next connection on
// without a restart. A renewed pair that does not load (written half, a
// key of another certificate) or names another edge is not used: the
// previous one stays, and the problem is logged once per change.
//
// # Caveats
//
//   - Revocation is not checked (no CRL, no OCSP): issue short-lived
//     certificates and renew them (the edge reloads them), or replace the
//     CA to cut every edge off.
//   - An expired or not-yet-valid certificate is loaded anyway, with a
//     warning: the hub refuses it, but the edge keeps ingesting and
//     retries, and takes the renewed one when it is written. A gateway
//     without a real-time clock may see a valid certificate as not yet
//     valid until it has synchronised.
package edgecert
