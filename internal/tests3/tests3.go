package tests3

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"go/build"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/runnel-io/runnel/internal/testcert"
	"github.com/runnel-io/runnel/internal/testproc"
)

// Version is the versitygw release the project tests against.
const Version = "v1.8.0"

// RootAccessKey is the root account's access key id; its secret is random
// per server (Server.SecretKey).
const RootAccessKey = "runnel-root"

// Options configure a server beyond the defaults.
type Options struct {
	// Buckets are created at start, owned by the root account. Default:
	// none (see Start).
	Buckets []string
	// Users are extra accounts of the server's internal IAM service, with
	// role "user": nothing is allowed them until a bucket policy says so
	// (Server.AllowRead).
	Users []User
	// TLS makes the server speak HTTPS with a certificate for 127.0.0.1
	// signed by a throwaway CA (Server.CAFile).
	TLS bool
	// StartTimeout bounds how long Start and Restart wait for the server
	// to answer. Default 20s.
	StartTimeout time.Duration
	// Binary is the versitygw executable; see the package comment for
	// where it is looked for by default.
	Binary string
}

// User is an IAM account.
type User struct {
	Access, Secret string
}

// Server is one running (or stopped) versitygw owned by a test.
type Server struct {
	t       testing.TB
	opts    Options
	bin     string
	dir     string // data: one directory per bucket
	iamDir  string
	logPath string
	port    int
	secret  string
	tls     testcert.Files
	tr      *http.Transport // of every client Server makes; idle connections closed at cleanup

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start launches versitygw with one bucket, "runnel-test".
func Start(t testing.TB) *Server {
	t.Helper()
	return StartWith(t, Options{Buckets: []string{"runnel-test"}})
}

// StartWith launches versitygw on a free 127.0.0.1 port and returns once it
// answers and the buckets exist. The server is stopped when the test
// ends. It skips the test when the binary is missing and
// RUNNEL_REQUIRE_SERVERS is not set (see the package comment).
func StartWith(t testing.TB, opts Options) *Server {
	t.Helper()
	bin := Binary(t, opts.Binary)
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 20 * time.Second
	}
	base := t.TempDir()
	s := &Server{
		t:       t,
		opts:    opts,
		bin:     bin,
		dir:     filepath.Join(base, "data"),
		iamDir:  filepath.Join(base, "iam"),
		logPath: filepath.Join(base, "versitygw.log"),
		secret:  randomSecret(),
	}
	for _, d := range []string{s.dir, s.iamDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatalf("tests3: %v", err)
		}
	}
	if err := s.writeUsers(); err != nil {
		t.Fatalf("tests3: users: %v", err)
	}
	if opts.TLS {
		var err error
		if s.tls, err = testcert.Write(base); err != nil {
			t.Fatalf("tests3: TLS files: %v", err)
		}
	}
	var err error
	if s.port, err = freePort(); err != nil {
		t.Fatalf("tests3: find a free port: %v", err)
	}
	t.Cleanup(func() {
		s.mu.Lock()
		if s.tr != nil {
			s.tr.CloseIdleConnections()
		}
		s.mu.Unlock()
		_ = s.stop(syscall.SIGTERM)
		if t.Failed() {
			t.Logf("tests3: versitygw on %s, log %s:\n%s", s.HostPort(), s.logPath, s.Log())
		}
	})
	s.start()
	for _, b := range opts.Buckets {
		s.CreateBucket(b)
	}
	return s
}

// Binary returns the versitygw executable (name, or the default search of
// the package comment when ""), skipping or failing t when there is none.
func Binary(t testing.TB, name string) string {
	t.Helper()
	bin, err := findBinary(name)
	if err == nil {
		return bin
	}
	if Required() {
		t.Fatalf("tests3: %v; run deploy/test/install-deps.sh (RUNNEL_REQUIRE_SERVERS is set, so this fails instead of skipping)", err)
	}
	t.Skipf("tests3: %v; run deploy/test/install-deps.sh (set RUNNEL_REQUIRE_SERVERS=1 to fail instead of skipping)", err)
	return ""
}

// Required reports whether RUNNEL_REQUIRE_SERVERS asks for real servers.
func Required() bool {
	v := os.Getenv("RUNNEL_REQUIRE_SERVERS")
	return v != "" && v != "0"
}

// Endpoint is the server's address as sync/objstore's Config.Endpoint
// takes it: "http://127.0.0.1:PORT" (https with Options.TLS).
func (s *Server) Endpoint() string {
	if s.opts.TLS {
		return "https://" + s.HostPort()
	}
	return "http://" + s.HostPort()
}

// HostPort is "127.0.0.1:PORT".
func (s *Server) HostPort() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port is the server's TCP port.
func (s *Server) Port() int { return s.port }

// AccessKey and SecretKey are the root account's credentials.
func (s *Server) AccessKey() string { return RootAccessKey }

// SecretKey is the root account's secret, random per server.
func (s *Server) SecretKey() string { return s.secret }

// CAFile is the PEM file of the CA that signed the server's certificate;
// "" unless Options.TLS.
func (s *Server) CAFile() string { return s.tls.CA }

// Dir is the data directory: one sub-directory per bucket.
func (s *Server) Dir() string { return s.dir }

// Log returns what the server has written to stdout and stderr so far,
// over all its runs.
func (s *Server) Log() string {
	b, _ := os.ReadFile(s.logPath)
	return string(b)
}

// Running reports whether the server process is alive.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running()
}

// Client returns a minio-go client of the root account, for tests that
// look at the server behind the code under test.
func (s *Server) Client() *minio.Client {
	s.t.Helper()
	c, err := s.client(RootAccessKey, s.secret)
	if err != nil {
		s.t.Fatalf("tests3: client: %v", err)
	}
	return c
}

func (s *Server) client(access, secret string) (*minio.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tr == nil {
		s.tr = &http.Transport{}
		if s.opts.TLS {
			pem, err := os.ReadFile(s.tls.CA)
			if err != nil {
				return nil, err
			}
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(pem)
			s.tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		}
	}
	return minio.New(s.HostPort(), &minio.Options{Creds: credentials.NewStaticV4(access, secret, ""), Secure: s.opts.TLS, Region: "us-east-1", Transport: s.tr})
}

// CreateBucket creates a bucket owned by the root account.
func (s *Server) CreateBucket(name string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Client().MakeBucket(ctx, name, minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
		s.t.Fatalf("tests3: create bucket %q: %v", name, err)
	}
}

// AllowRead sets bucket's policy so that the account access may list it
// and read its objects, and nothing else: for that account, a read-only
// bucket.
func (s *Server) AllowRead(bucket, access string) {
	s.t.Helper()
	policy := fmt.Sprintf(`{
  "Version": "2012-10-17",
  "Statement": [{
    "Effect": "Allow",
    "Principal": {"AWS": [%q]},
    "Action": ["s3:ListBucket", "s3:GetObject", "s3:GetBucketLocation"],
    "Resource": ["arn:aws:s3:::%s", "arn:aws:s3:::%s/*"]
  }]
}`, access, bucket, bucket)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Client().SetBucketPolicy(ctx, bucket, policy); err != nil {
		s.t.Fatalf("tests3: bucket policy of %q: %v", bucket, err)
	}
}

// Stop stops the server with SIGTERM and waits for it. Stopping a stopped
// server does nothing.
func (s *Server) Stop() {
	s.t.Helper()
	if err := s.stop(syscall.SIGTERM); err != nil {
		s.t.Fatalf("tests3: stop: %v", err)
	}
}

// Kill stops the server with SIGKILL.
func (s *Server) Kill() {
	s.t.Helper()
	if err := s.stop(syscall.SIGKILL); err != nil {
		s.t.Fatalf("tests3: kill: %v", err)
	}
}

// Restart stops the server if it runs and starts it again on the same port
// with the same data, returning once it answers.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.start()
}

// Start starts a stopped server again (same port, same data); it does
// nothing when the server runs.
func (s *Server) Start() {
	s.t.Helper()
	s.start()
}

func (s *Server) writeUsers() error {
	type account struct {
		Access string `json:"access"`
		Secret string `json:"secret"`
		Role   string `json:"role"`
	}
	conf := struct {
		AccessAccounts map[string]account `json:"accessAccounts"`
	}{AccessAccounts: map[string]account{}}
	for _, u := range s.opts.Users {
		if u.Access == RootAccessKey || u.Access == "" || u.Secret == "" {
			return fmt.Errorf("user %q: want a non-empty access key other than the root's, and a secret", u.Access)
		}
		conf.AccessAccounts[u.Access] = account{Access: u.Access, Secret: u.Secret, Role: "user"}
	}
	b, err := json.Marshal(conf)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(s.iamDir, "users.json"), b, 0o600)
}

func (s *Server) args() []string {
	args := []string{"--port", s.HostPort(), "--iam-dir", s.iamDir, "--region", "us-east-1", "--quiet"}
	if s.opts.TLS {
		args = append(args, "--cert", s.tls.Cert, "--key", s.tls.Key)
	}
	return append(args, "posix", s.dir)
}

// start launches the process and waits until it answers.
func (s *Server) start() {
	s.t.Helper()
	s.mu.Lock()
	if s.running() {
		s.mu.Unlock()
		return
	}
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.mu.Unlock()
		s.t.Fatalf("tests3: %v", err)
	}
	cmd := exec.Command(s.bin, s.args()...)
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+RootAccessKey, "ROOT_SECRET_KEY="+s.secret)
	cmd.Stdout, cmd.Stderr = logf, logf
	testproc.DieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		logf.Close()
		s.t.Fatalf("tests3: start %s: %v", s.bin, err)
	}
	done := make(chan struct{})
	s.cmd, s.done, s.err = cmd, done, nil
	go func() {
		err := cmd.Wait()
		logf.Close()
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
		close(done)
	}()
	s.mu.Unlock()

	cli, err := s.client(RootAccessKey, s.secret)
	if err != nil {
		s.t.Fatalf("tests3: client: %v", err)
	}
	deadline := time.Now().Add(s.opts.StartTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cli.ListBuckets(ctx)
		cancel()
		if err == nil {
			return
		}
		select {
		case <-done:
			s.t.Fatalf("tests3: versitygw exited at start (%v); log:\n%s", s.exitErr(), s.Log())
		default:
		}
		if time.Now().After(deadline) {
			_ = s.stop(syscall.SIGKILL)
			s.t.Fatalf("tests3: versitygw not answering on %s after %v (%v); log:\n%s", s.HostPort(), s.opts.StartTimeout, err, s.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop signals the process and waits for it, escalating to SIGKILL after
// 10 s.
func (s *Server) stop(sig syscall.Signal) error {
	s.mu.Lock()
	if !s.running() {
		s.mu.Unlock()
		return nil
	}
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %v to pid %d: %w", sig, cmd.Process.Pid, err)
	}
	select {
	case <-done:
		return nil
	case <-time.After(10 * time.Second):
	}
	_ = cmd.Process.Kill()
	<-done
	return fmt.Errorf("pid %d ignored %v for 10s; killed", cmd.Process.Pid, sig)
}

// running reports whether the process is alive; s.mu must be held.
func (s *Server) running() bool {
	if s.done == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

func (s *Server) exitErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func findBinary(name string) (string, error) {
	if name == "" {
		name = os.Getenv("RUNNEL_VERSITYGW")
	}
	if name != "" {
		p, err := exec.LookPath(name)
		if err != nil {
			return "", fmt.Errorf("versitygw binary %q: %w", name, err)
		}
		return p, nil
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	var dirs []string
	if gobin := os.Getenv("GOBIN"); gobin != "" {
		dirs = append(dirs, gobin)
	}
	for _, gp := range filepath.SplitList(build.Default.GOPATH) {
		dirs = append(dirs, filepath.Join(gp, "bin"))
	}
	for _, d := range dirs {
		p := filepath.Join(d, "versitygw")
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("versitygw binary not found ($RUNNEL_VERSITYGW, $PATH, %v)", dirs)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randomSecret() string {
	var b [20]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Dump is the server's data directory as "bucket/key: size" lines, for
// failure messages.
func (s *Server) Dump() string {
	var buf bytes.Buffer
	_ = filepath.Walk(s.dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			rel, _ := filepath.Rel(s.dir, p)
			fmt.Fprintf(&buf, "%s: %d\n", rel, fi.Size())
		}
		return nil
	})
	return buf.String()
}
