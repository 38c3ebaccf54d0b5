package settings

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/runnel-io/runnel/sync/objstore"
)

// ObjectStore is how a node reaches S3-compatible object storage: the
// settings under object_store.*, shared by every s3:// URL of its config
// (the edge's snapshot.store and raw_archive.store, the hub's archive.url).
// The secret is never shown: Secret settings print as "***".
type ObjectStore struct {
	Endpoint        string // host:port (HTTPS), or http(s)://host:port
	Region          string
	AccessKeyID     string
	SecretAccessKey string
	CredentialsFile string
	CAFile          string
	BandwidthLimit  int64 // upload bytes/s, 0: none
}

// ObjectStoreSettings are the object_store.* settings of a config C.
func ObjectStoreSettings[C any](envPrefix string, o func(*C) *ObjectStore) []*Setting[C] {
	return []*Setting[C]{
		{Path: "object_store.endpoint", Flag: "object-store-endpoint", Env: envPrefix + "OBJECT_STORE_ENDPOINT", Example: "s3.eu-west-1.amazonaws.com",
			Doc:   "The S3-compatible server every s3:// URL of this config is on: host:port (HTTPS), https://host:port, or http://host:port (plaintext: loopback and tests only). Empty: s3.amazonaws.com.",
			Value: String(func(c *C) *string { return &o(c).Endpoint }, nil)},
		{Path: "object_store.region", Flag: "object-store-region", Env: envPrefix + "OBJECT_STORE_REGION", Example: "eu-west-1",
			Doc:   "The buckets' region. Empty: asked of the server.",
			Value: String(func(c *C) *string { return &o(c).Region }, nil)},
		{Path: "object_store.access_key_id", Flag: "object-store-access-key-id", Env: envPrefix + "OBJECT_STORE_ACCESS_KEY_ID", Example: "AKIA...",
			Doc:   "Static credentials, with object_store.secret_access_key. Neither, and no credentials_file: the environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or MINIO_ACCESS_KEY and MINIO_SECRET_KEY).",
			Value: String(func(c *C) *string { return &o(c).AccessKeyID }, nil)},
		{Path: "object_store.secret_access_key", Flag: "object-store-secret-access-key", Env: envPrefix + "OBJECT_STORE_SECRET_ACCESS_KEY", Secret: true, Example: "\"...\"",
			Doc:   "The secret of object_store.access_key_id. Never logged. A flag is visible to every user of the host (ps): prefer the variable or object_store.credentials_file.",
			Value: String(func(c *C) *string { return &o(c).SecretAccessKey }, nil)},
		{Path: "object_store.credentials_file", Flag: "object-store-credentials-file", Env: envPrefix + "OBJECT_STORE_CREDENTIALS_FILE", Example: "/etc/runnel/s3-credentials",
			Doc:   "A file holding the credentials: the [default] profile of an AWS credentials file (aws_access_key_id, aws_secret_access_key). Not together with static keys.",
			Value: Path(func(c *C) *string { return &o(c).CredentialsFile }, nil)},
		{Path: "object_store.ca_file", Flag: "object-store-ca-file", Env: envPrefix + "OBJECT_STORE_CA_FILE", Example: "/etc/runnel/s3-ca.pem",
			Doc:   "PEM certificates to trust besides the system's, for a server with a private CA.",
			Value: Path(func(c *C) *string { return &o(c).CAFile }, nil)},
		{Path: "object_store.bandwidth_limit", Flag: "object-store-bandwidth-limit", Env: envPrefix + "OBJECT_STORE_BANDWIDTH_LIMIT", Default: "0",
			Doc:   "Most bytes per second all uploads together may send (the gateway's uplink is shared with the hub's). 0: no cap.",
			Value: Size(func(c *C) *int64 { return &o(c).BandwidthLimit }, nil)},
	}
}

// Open returns the bucket rawURL (s3://bucket/prefix) names, reached with
// o. It checks the bucket at once (bounded by ctx): a refusal that no
// retry fixes (wrong credentials, a missing bucket, access denied, a
// certificate that does not verify) is an error naming it, so a bad
// config stops the start; an unreachable server is only logged, because
// the cold tier must not keep a gateway or a hub from running — uploads
// retry until it is back.
func (o ObjectStore) Open(ctx context.Context, rawURL string, lg *slog.Logger) (*objstore.Bucket, error) {
	b, err := objstore.New(objstore.Config{URL: rawURL, Endpoint: o.Endpoint, Region: o.Region,
		AccessKeyID: o.AccessKeyID, SecretAccessKey: o.SecretAccessKey, CredentialsFile: o.CredentialsFile,
		CAFile: o.CAFile, BandwidthLimit: o.BandwidthLimit, Logger: lg})
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	switch err := b.Check(cctx); {
	case err == nil:
	case errors.Is(err, objstore.ErrRefused):
		b.Close()
		return nil, err
	default:
		lg.Warn("object storage not reachable at start; uploads retry until it is", "url", rawURL, "err", err)
	}
	return b, nil
}
