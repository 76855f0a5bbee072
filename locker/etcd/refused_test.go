package etcd

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// secret is a password that must never show up in an error.
const secret = "s3cret-PASSWORD"

// New refuses configurations that can never work, naming the problem, and
// never echoes a password.
func TestNewRefusesBadConfig(t *testing.T) {
	dir := t.TempDir()
	ca, _ := writeCA(t, dir, "ca")
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := func() Config {
		return Config{
			Options:   locker.Options{Key: "job", TTL: 5 * time.Second},
			Endpoints: []string{"127.0.0.1:2379"},
			Username:  "root",
			Password:  secret,
		}
	}
	tests := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"bad key", func(c *Config) { c.Key = "../etc" }, "key"},
		{"bad prefix", func(c *Config) { c.Prefix = "a//b" }, "prefix"},
		{"zero TTL", func(c *Config) { c.TTL = 0 }, "TTL"},
		{"endpoint without port", func(c *Config) { c.Endpoints = []string{"localhost"} }, "host:port"},
		{"endpoint with bad port", func(c *Config) { c.Endpoints = []string{"localhost:http"} }, "port"},
		{"endpoint with bad scheme", func(c *Config) { c.Endpoints = []string{"ftp://localhost:2379"} }, "scheme"},
		{"endpoint with a path", func(c *Config) { c.Endpoints = []string{"http://localhost:2379/v3"} }, "nothing else"},
		{"mixed schemes", func(c *Config) { c.Endpoints = []string{"http://a:2379", "https://b:2379"} }, "mix"},
		{"TLS files with http://", func(c *Config) { c.Endpoints = []string{"http://a:2379"}; c.CACert = ca }, "http://"},
		{"missing CA file", func(c *Config) { c.CACert = filepath.Join(dir, "nope.pem") }, "no such file"},
		{"CA file without a certificate", func(c *Config) { c.CACert = garbage }, "no PEM certificate"},
		{"cert without key", func(c *Config) { c.Cert = ca }, "together"},
		{"unparsable key pair", func(c *Config) { c.Cert = garbage; c.Key = garbage }, "client certificate"},
		{"user without password", func(c *Config) { c.Password = "" }, "password"},
		{"password without user", func(c *Config) { c.Username = "" }, "user name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base()
			tc.mod(&cfg)
			l, err := New(cfg)
			var ce *locker.ConfigError
			if !errors.Is(err, locker.ErrRefused) || !errors.As(err, &ce) {
				t.Fatalf("New = %v, %v; want a ConfigError", l, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error %q contains the password", err)
			}
		})
	}

	// etcdctl's "user:password" form works, and New alone dials nothing.
	cfg := base()
	cfg.Username, cfg.Password = "root:"+secret, ""
	l, err := New(cfg)
	if err != nil {
		t.Fatalf("New with user:password: %v", err)
	}
	defer l.Close()
	if l.username != "root" || l.password != secret {
		t.Errorf("user:password parsed as %q / %q", l.username, strings.Repeat("*", len(l.password)))
	}
}

// Handles round-trip and foreign ones are refused.
func TestParseHandle(t *testing.T) {
	s := &lease{id: 0x694d7c, key: "/p/job/@694d7c"}
	id, err := parseHandle(s.Handle(), "/p/job/@")
	if err != nil || id != s.id {
		t.Fatalf("parseHandle(%q) = %x, %v", s.Handle(), id, err)
	}
	for _, h := range []string{"", "694d7c", "zz:/p/job/@zz", "694d7c:/p/other/@694d7c", "694d7d:/p/job/@694d7c", "-1:/p/job/@-1"} {
		if _, err := parseHandle(h, "/p/job/@"); !errors.Is(err, locker.ErrRefused) {
			t.Errorf("parseHandle(%q) = %v, want ErrRefused", h, err)
		}
	}
}

// With auth enabled, wrong credentials and missing permissions are refused
// at once, without the password in the error; right ones work.
func TestAuth(t *testing.T) {
	eps := testcluster.StartEtcd(t, 1).Endpoints()
	cli := rawClient(t, eps)
	ctx := lockertest.Ctx(t, 10*time.Second)
	for _, step := range []func() error{
		func() error { _, err := cli.RoleAdd(ctx, "root"); return err },
		func() error { _, err := cli.UserAdd(ctx, "root", secret); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.UserAdd(ctx, "nobody", secret); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatalf("set up auth: %v", err)
		}
	}

	refused := []struct {
		name, user, password string
	}{
		{"wrong password", "root", secret + "-wrong"},
		{"unknown user", "mallory", secret},
		{"no permission", "nobody", secret},
		{"no credentials", "", ""},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			l := newLocker(t, eps, lockertest.Key(t), func(c *Config) { c.Username, c.Password = tc.user, tc.password })
			start := time.Now()
			_, err := l.Acquire(lockertest.Ctx(t, 10*time.Second))
			took := time.Since(start)
			t.Logf("%v after %v", err, took)
			if !errors.Is(err, locker.ErrRefused) {
				t.Fatalf("Acquire = %v, want ErrRefused", err)
			}
			if took > 2*time.Second {
				t.Errorf("refusal took %v, want it at once", took)
			}
			if tc.password != "" && strings.Contains(err.Error(), tc.password) {
				t.Errorf("error %q contains the password", err)
			}
			// The control record needs the same credentials: refused at
			// once too, and a wait does not wait a refusal out.
			for name, call := range map[string]func(context.Context) error{
				"Control":     func(ctx context.Context) error { _, err := l.Control(ctx); return err },
				"SetControl":  func(ctx context.Context) error { _, err := l.SetControl(ctx, locker.Control{}); return err },
				"WaitControl": func(ctx context.Context) error { _, err := l.WaitControl(ctx, ""); return err },
			} {
				start := time.Now()
				if err := call(lockertest.Ctx(t, 10*time.Second)); !errors.Is(err, locker.ErrRefused) || time.Since(start) > 2*time.Second {
					t.Errorf("%s = %v after %v, want ErrRefused at once", name, err, time.Since(start))
				}
			}
		})
	}

	t.Run("right password", func(t *testing.T) {
		l := newLocker(t, eps, lockertest.Key(t), func(c *Config) { c.Username, c.Password = "root", secret })
		lease := lockertest.MustAcquire(t, l)
		// The first renewal opens the keep-alive stream and so
		// authenticates; later ones reuse it.
		start := time.Now()
		if _, err := lease.Renew(lockertest.Ctx(t, 5*time.Second)); err != nil {
			t.Fatalf("Renew: %v", err)
		}
		first := time.Since(start)
		start = time.Now()
		for i := 0; i < 5; i++ {
			if _, err := lease.Renew(lockertest.Ctx(t, 5*time.Second)); err != nil {
				t.Fatalf("Renew: %v", err)
			}
		}
		t.Logf("renew round trip with auth: first %v, then %v on average", first, time.Since(start)/5)
		h, err := l.Leader(lockertest.Ctx(t, 5*time.Second))
		if err != nil || h.Epoch != lease.Epoch() {
			t.Fatalf("Leader = %+v, %v", h, err)
		}
	})
}

// The wrong transport is refused at once with a clear message: TLS towards
// a plaintext etcd, plaintext towards a TLS server, a server certificate
// from another CA.
func TestTransportMismatch(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := writeCA(t, dir, "ca")
	otherCA, _ := writeCA(t, dir, "other-ca")
	tlsServer := startTLSServer(t, ca, caKey)
	var plain []string // host:port, so that the CA file means TLS
	for _, ep := range testcluster.StartEtcd(t, 1).Endpoints() {
		plain = append(plain, strings.TrimPrefix(ep, "http://"))
	}

	tests := []struct {
		name      string
		endpoints []string
		ca        string
		want      string
	}{
		{"TLS to plaintext etcd", plain, ca, "TLS handshake failed"},
		{"plaintext to TLS server", []string{tlsServer}, "", "speaks TLS"},
		{"server certificate from another CA", []string{tlsServer}, otherCA, "certificate"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newLocker(t, tc.endpoints, lockertest.Key(t), func(c *Config) { c.CACert = tc.ca })
			start := time.Now()
			_, err := l.Acquire(lockertest.Ctx(t, 10*time.Second))
			took := time.Since(start)
			t.Logf("%v after %v", err, took)
			if !errors.Is(err, locker.ErrRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Acquire = %v, want ErrRefused mentioning %q", err, tc.want)
			}
			if took > 2*time.Second {
				t.Errorf("refusal took %v, want it at once", took)
			}
		})
	}
}

// An unreachable cluster is a retryable error, not a refusal, and a call
// against it ends with its context instead of hanging: a closed port fails
// at once, a server that accepts and never answers fails at the deadline.
func TestUnreachable(t *testing.T) {
	closed := closedPort(t)
	silent := testsupport.SilentServer(t)
	tests := []struct {
		name      string
		endpoints []string
	}{
		{"closed port", []string{closed}},
		{"silent server", []string{silent}},
		{"both", []string{closed, silent}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := newLocker(t, tc.endpoints, lockertest.Key(t))
			for _, call := range []struct {
				name string
				do   func(context.Context) error
			}{
				{"Acquire", func(ctx context.Context) error { _, err := l.Acquire(ctx); return err }},
				{"Leader", func(ctx context.Context) error { _, err := l.Leader(ctx); return err }},
			} {
				start := time.Now()
				err := call.do(lockertest.Ctx(t, 2*time.Second))
				took := time.Since(start)
				t.Logf("%s: %v after %v", call.name, err, took)
				if err == nil || errors.Is(err, locker.ErrRefused) {
					t.Errorf("%s = %v, want a retryable error", call.name, err)
				}
				if took > 2500*time.Millisecond {
					t.Errorf("%s with a 2s context took %v", call.name, took)
				}
			}
		})
	}
}

// writeCA writes a self-signed CA certificate to dir/name.pem and returns
// its path and the CA.
func writeCA(t testing.TB, dir, name string) (string, *testsupport.CA) {
	t.Helper()
	ca := testsupport.NewCA(t, dir, name)
	return ca.Path, ca
}

// startTLSServer listens on 127.0.0.1 with a certificate signed by ca,
// completes TLS handshakes and then holds the connection; it returns the
// address.
func startTLSServer(t testing.TB, _ string, ca *testsupport.CA) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{ca.ServerCert(t)}})
	if err != nil {
		t.Fatal(err)
	}
	testsupport.Serve(t, ln, func(c net.Conn) { _ = c.(*tls.Conn).Handshake() })
	return ln.Addr().String()
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// A renewal against a server that never answers ends with its context.
func TestRenewBoundedByContext(t *testing.T) {
	k := newKeeper(rawClient(t, []string{testsupport.SilentServer(t)}), 0x694d7c)
	defer k.close()
	start := time.Now()
	_, err := k.renew(lockertest.Ctx(t, 500*time.Millisecond))
	took := time.Since(start)
	t.Logf("%v after %v", err, took)
	if !errors.Is(err, context.DeadlineExceeded) || took > time.Second {
		t.Fatalf("renew with a 500ms context = %v after %v; want DeadlineExceeded in time", err, took)
	}
}

// A TLS handshake that a server or the network cuts short (EOF, reset) is
// a connection problem worth retrying, not a refusal: only TLS alerts,
// certificate errors and an answer that is not TLS at all are.
func TestTLSHandshakeCutIsRetryable(t *testing.T) {
	dir := t.TempDir()
	ca, _ := writeCA(t, dir, "ca")
	listen := func(t *testing.T, greet func(net.Conn)) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		testsupport.Serve(t, ln, greet)
		return ln.Addr().String()
	}
	tests := []struct {
		name  string
		greet func(net.Conn)
	}{
		{"EOF", func(c net.Conn) { c.Close() }},
		{"reset", func(c net.Conn) {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			c.Close()
		}},
		{"EOF after reading the hello", func(c net.Conn) {
			var b [64]byte
			_, _ = c.Read(b[:])
			c.Close()
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newLocker(t, []string{listen(t, tc.greet)}, lockertest.Key(t), func(c *Config) { c.CACert = ca })
			_, err := l.Acquire(lockertest.Ctx(t, 2*time.Second))
			t.Logf("Acquire: %v", err)
			if err == nil || errors.Is(err, locker.ErrRefused) {
				t.Fatalf("Acquire = %v, want a retryable error", err)
			}
		})
	}
}
