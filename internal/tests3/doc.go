// Package tests3 runs a real S3-compatible server for tests: versitygw
// v1.8.0 (Apache-2.0) on its posix backend.
//
// The object-storage tier is only as good as its behaviour against a real
// server — its signatures, its If-None-Match, its multipart bookkeeping,
// its errors — so sync/objstore and the code above it test against
// versitygw, with in-process fakes (gofakes3) only beside it. [Start]
// launches one server per test on a free loopback port, with its data
// directory, IAM directory and log in t.TempDir(), waits until it answers,
// creates the buckets asked for, and stops it in t.Cleanup. When the test
// fails, the server's log is copied into the test log.
//
// # Model
//
// A [Server] is one server identity: a port, root credentials, a data
// directory (one sub-directory per bucket, one file per object) and an IAM
// directory (users.json) that survive [Server.Stop], [Server.Kill] and
// [Server.Restart]. Objects, incomplete multipart uploads and users
// persist across restarts, as they would for a real server.
//
// With [Options.Users] the server runs its internal IAM service with these
// extra accounts (role "user": they own nothing and may do only what a
// bucket policy grants); [Server.AllowRead] gives one of them read-only
// access to a bucket — the read-only bucket of a misconfigured gateway.
// With [Options.TLS] the server speaks HTTPS only, with a certificate for
// 127.0.0.1 signed by a CA made for the test ([Server.CAFile]).
//
// # Finding the binary
//
// deploy/test/install-deps.sh installs it with `go install
// github.com/versity/versitygw/cmd/versitygw@v1.8.0` into `go env GOBIN`,
// or `$(go env GOPATH)/bin` (usually ~/go/bin) when GOBIN is unset. Start
// looks for it at [Options.Binary], then $RUNNEL_VERSITYGW, then on $PATH,
// then in $GOBIN and in the bin directory of every GOPATH entry (default
// ~/go).
//
// When the binary is missing the test is skipped — unless
// RUNNEL_REQUIRE_SERVERS is set (to anything but "" or "0"), as `make
// test` and CI set it: then a missing binary fails the test, so that CI
// cannot go green by testing nothing.
//
// # Caveats
//
//   - The free port is found by binding :0 and closing it, so another
//     process can take it before versitygw binds it; Start then fails with
//     the server's log.
//   - On Linux the server is started with PR_SET_PDEATHSIG, so a test
//     process that dies without running its cleanups takes its servers
//     with it.
//   - Stop, Kill and Restart call t.Fatal on failure, so, like every
//     testing.TB method that may stop the test, they must be called from
//     the test goroutine.
//   - versitygw's posix backend maps keys to paths: a key cannot be both an
//     object and a "directory" of other objects ("a" and "a/b"), and keys
//     with empty, "." or ".." segments are refused. sync/objstore refuses
//     such keys itself.
package tests3
