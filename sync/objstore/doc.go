// Package objstore is runnel's object storage: a prefix of one S3 bucket,
// reached with minio-go, with the handful of methods the cold tier needs
// (edge snapshots, raw segments, the hub's results archive) and an
// in-memory twin for the unit tests of the packages that use it.
//
// # Model
//
// A [Bucket] is "s3://bucket/prefix" on an endpoint. Every key its methods
// take or return is relative to the prefix. Objects are written once:
//
//   - [Bucket.Put] sends a reader's bytes with If-None-Match: *, so the
//     server refuses to replace an existing object ([ErrExists]); objects
//     over PartSize go up as multipart uploads, completed with the same
//     condition.
//   - [Bucket.PutFile] does the same for a file, and resumes: it finds an
//     incomplete multipart upload of the key, keeps the parts whose size
//     and ETag (the part's MD5) match the file's bytes at that place, and
//     sends only the rest. A gateway killed mid-upload loses at most the
//     parts in flight. If the key already holds this file's bytes (a crash
//     after completion), PutFile succeeds.
//   - [Bucket.Get] streams an object and resumes a dropped connection with
//     a ranged GET of the same ETag; [Bucket.Stat], [Bucket.List] (sorted,
//     recursive) and [Bucket.Delete] (idempotent) complete the set.
//
// [Mem] has the same methods and semantics, plus fault injection
// ([Mem.SetFault]). Consumers declare the small interface they use; both
// satisfy it.
//
// # Invariants
//
//   - Nothing is overwritten: a successful Put or PutFile created the
//     object, or found exactly its bytes there (PutFile, and a Put whose
//     answer was lost and whose retry met its own object, compared by MD5).
//   - A failed Put leaves no object and aborts its multipart upload. A
//     failed PutFile leaves no object; after a retryable failure or a
//     canceled ctx its upload stays for the next PutFile of the key, after
//     a final one (ErrExists, ErrRefused) it is aborted. Other incomplete
//     uploads of the key are aborted by the PutFile that resumes one.
//   - Retries are bounded: one step (a PUT, a part, a listing page, a GET)
//     is tried at most Config.Attempts times, 5xx/429/timeouts/resets only,
//     with jittered exponential back-off on Config.Clock, and never past
//     ctx. 4xx answers are final at once.
//   - Every error is an [*Error] naming the operation, the bucket and the
//     key, with a [Cause]; errors.Is finds the class: [ErrExists],
//     [ErrNotFound], [ErrRefused] (credentials, permissions, a missing
//     bucket, TLS trust, other 4xx), [ErrUnavailable] (retries spent),
//     [ErrCorrupt], [ErrInvalidKey], [ErrClosed], and ctx's error.
//     Credentials never appear in errors, logs, or a printed [Config].
//   - The bandwidth cap (Config.BandwidthLimit) is a token bucket shared by
//     every upload of the Bucket, retries included.
//
// # Credentials
//
// In order: Config.AccessKeyID and SecretAccessKey (and SessionToken);
// Config.CredentialsFile; the environment (AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, or MINIO_ACCESS_KEY,
// MINIO_SECRET_KEY). Instance metadata is not queried. The credentials
// file is the default profile of an AWS shared credentials file:
//
//	# comments start with # or ;
//	[default]
//	aws_access_key_id = AKIA...
//	aws_secret_access_key = ...
//	aws_session_token = ...      (optional)
//
// Lines before any [section] count as [default]; other sections and other
// names (region, …) are ignored; "aws_" may be left out. A malformed file
// is refused with its path and line, never its values.
//
// # Metrics
//
// [Bucket.Stats] is a snapshot: bytes and objects uploaded, bytes
// downloaded, retries, resumed parts, failures by Cause, and the uploads
// in flight (the queue: their count, pending bytes, the oldest one's
// start). [Bucket.Collector] exports it to Prometheus under a namespace
// of the caller's choosing (see [NewCollector]).
//
// # Caveats
//
//   - Open checks the bucket with HeadBucket, which needs s3:ListBucket. A
//     gateway with write-only credentials, or one that must start offline,
//     uses [New] and learns of problems from its first upload.
//   - Resume relies on part ETags being the parts' MD5s, which holds for
//     AWS S3 without SSE-KMS, MinIO and versitygw. Where it does not, the
//     parts are not recognised and are sent again (correct, not cheaper).
//     PutFile's "already uploaded" check relies on S3's multipart ETag
//     (the MD5 of the parts' MD5s, "-N") with the same PartSize.
//   - The never-overwrite guarantee is the server's If-None-Match. Servers
//     that ignore it on CompleteMultipartUpload (gofakes3) keep only the
//     check Put and PutFile make before uploading, which a concurrent
//     writer can race.
//   - Put of a reader that is not an io.ReaderAt holds one part (PartSize,
//     16 MiB by default) in memory. PutFile reads the file twice: once to
//     hash a part, once to send it.
//   - Keys follow the rules of ErrInvalidKey: stricter than S3, so that
//     servers mapping keys to files (versitygw's posix backend) hold them
//     faithfully.
//   - Config.IdleTimeout fails a connection that moves no bytes for that
//     long; a server slower than that to answer a CompleteMultipartUpload
//     of a huge object would be retried (harmlessly: the retry finds the
//     object and compares its ETag).
package objstore
