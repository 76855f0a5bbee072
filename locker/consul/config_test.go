package consul

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// testConfig is a valid configuration for tests: Consul's shortest TTL and
// a small lock-delay.
func testConfig(key, addr string) Config {
	k, slot := lockertest.KeySlot(key)
	return Config{
		Options: locker.Options{
			Key:    k,
			Slot:   slot,
			Prefix: "leaderrun-test",
			ID:     "test-" + key,
			TTL:    MinTTL,
		},
		Address:   addr,
		LockDelay: 250 * time.Millisecond,
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	dir := t.TempDir()
	garbage := testsupport.WriteFile(t, filepath.Join(dir, "garbage.pem"), "not a certificate", 0o600)
	tests := []struct {
		name   string
		change func(*Config)
		field  string // the ConfigError's Field
		want   []string
	}{
		{"ttl below Consul's minimum", func(c *Config) { c.TTL = 5 * time.Second }, "TTL", []string{"5s", "10s"}},
		{"ttl above Consul's maximum", func(c *Config) { c.TTL = 25 * time.Hour }, "TTL", []string{"24h"}},
		{"checks without lock-delay >= ttl", func(c *Config) {
			c.SessionChecks, c.LockDelay = []string{"serfHealth"}, time.Second
		}, "SessionChecks", []string{"serfHealth", "lock-delay"}},
		{"lock-delay Consul would clamp", func(c *Config) { c.LockDelay = 2 * time.Minute }, "LockDelay", []string{"1m0s"}},
		{"negative lock-delay", func(c *Config) { c.LockDelay = -time.Second }, "LockDelay", nil},
		{"bad key", func(c *Config) { c.Key = "../etc" }, "Key", nil},
		{"bad prefix", func(c *Config) { c.Prefix = "/x" }, "Prefix", nil},
		{"missing token file", func(c *Config) { c.TokenFile = filepath.Join(dir, "nope") }, "TokenFile", nil},
		{"unreadable CA file", func(c *Config) { c.CACert = filepath.Join(dir, "nope.pem") }, "CACert", nil},
		{"garbage CA file", func(c *Config) { c.CACert = garbage }, "CACert", []string{"no PEM"}},
		{"garbage client cert", func(c *Config) { c.ClientCert, c.ClientKey = garbage, garbage }, "ClientCert", nil},
		{"client cert without key", func(c *Config) { c.ClientCert = garbage }, "ClientCert", []string{"together"}},
		{"empty address in a list", func(c *Config) { c.Address = "127.0.0.1:1,,127.0.0.1:2" }, "Address", nil},
		{"unix socket in a list", func(c *Config) { c.Address = "unix:///run/consul.sock,127.0.0.1:2" }, "Address", []string{"unix"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig("cfg", "127.0.0.1:1")
			tt.change(&cfg)
			_, err := New(cfg)
			var ce *locker.ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, locker.ErrRefused) || ce.Field != tt.field {
				t.Fatalf("New: got %v, want a ConfigError on %s", err, tt.field)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestNewAcceptsChecksWithLongLockDelay(t *testing.T) {
	cfg := testConfig("cfg", "127.0.0.1:1")
	cfg.SessionChecks, cfg.LockDelay = []string{"serfHealth"}, cfg.TTL
	if _, err := New(cfg); err != nil {
		t.Fatalf("New: %v", err)
	}
}

func TestTokenPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	if err := os.WriteFile(file, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	envFile := filepath.Join(dir, "env-token")
	if err := os.WriteFile(envFile, []byte("from-env-file"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CONSUL_HTTP_TOKEN", "from-env")
	tests := []struct {
		name, token, file, envFile, want string
	}{
		{"env token", "", "", "", "from-env"},
		{"env file beats env token", "", "", envFile, "from-env-file"},
		{"flag token beats env", "from-flag", "", envFile, "from-flag"},
		{"flag file beats flag token", "from-flag", file, envFile, "from-file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("CONSUL_HTTP_TOKEN_FILE", tt.envFile)
			cfg := testConfig("cfg", "127.0.0.1:1")
			cfg.Token, cfg.TokenFile = tt.token, tt.file
			l, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if l.token != tt.want {
				t.Errorf("token %q, want %q", l.token, tt.want)
			}
		})
	}
}

func TestHandleRoundTrip(t *testing.T) {
	h := formatHandle("5f6c0d6e-1c3b-4b7e-9a59-8f1f0b7a1d2e", "leaderrun/billing/daily")
	s, k, err := parseHandle(h)
	if err != nil || s != "5f6c0d6e-1c3b-4b7e-9a59-8f1f0b7a1d2e" || k != "leaderrun/billing/daily" {
		t.Fatalf("parseHandle(%q) = %q, %q, %v", h, s, k, err)
	}
	for _, bad := range []string{"", "consul:", "consul:abc", "consul::key", "etcd:123:key", "consul:a/b:key"} {
		if _, _, err := parseHandle(bad); err == nil {
			t.Errorf("parseHandle(%q) accepted a bad handle", bad)
		}
	}
}

func TestRefusedClassification(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"403", api.StatusError{Code: 403, Body: "Permission denied"}, true},
		{"acl not found", api.StatusError{Code: 403, Body: "ACL not found"}, true},
		{"401", api.StatusError{Code: 401, Body: "unauthorized"}, true},
		{"forwarded permission denied", api.StatusError{Code: 500, Body: "rpc error making call: Permission denied"}, true},
		{"no leader", api.StatusError{Code: 500, Body: "No cluster leader"}, false},
		{"invalid session", api.StatusError{Code: 500, Body: "invalid session"}, false},
		{"connection refused", &net.OpError{Op: "dial", Err: errors.New("connection refused")}, false},
		{"deadline", context.DeadlineExceeded, false},
		{"unknown CA", fmt.Errorf("put: %w", x509.UnknownAuthorityError{}), true},
	}
	for _, tt := range tests {
		if got := refused(tt.err); got != tt.want {
			t.Errorf("%s: refused(%v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}

func TestErrorsNeverShowTheToken(t *testing.T) {
	const token = "3f1b6a2c-secret-token"
	l := &Locker{token: token}
	err := l.fail("acquire x", fmt.Errorf("agent said: %s is bad: %w", token, api.StatusError{Code: 403, Body: "ACL not found " + token}))
	if strings.Contains(err.Error(), token) {
		t.Fatalf("token leaked: %v", err)
	}
	if !errors.Is(err, locker.ErrRefused) {
		t.Fatalf("%v does not wrap ErrRefused", err)
	}
	var se api.StatusError
	if !errors.As(err, &se) || se.Code != 403 {
		t.Fatalf("%v lost its StatusError", err)
	}
}

// TestTLSFailuresAreRefused speaks to real TLS and plain HTTP servers with
// the wrong expectations: retrying cannot help, so Acquire must say refused
// at once instead of retrying forever.
func TestTLSFailuresAreRefused(t *testing.T) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "no", 500) })
	quiet := log.New(io.Discard, "", 0) // the handshake errors are the point
	tlsSrv := httptest.NewUnstartedServer(handler)
	tlsSrv.Config.ErrorLog = quiet
	tlsSrv.StartTLS()
	defer tlsSrv.Close()
	plainSrv := httptest.NewUnstartedServer(handler)
	plainSrv.Config.ErrorLog = quiet
	plainSrv.Start()
	defer plainSrv.Close()

	for name, addr := range map[string]string{
		"unknown CA":         tlsSrv.URL,
		"https to plain":     strings.Replace(plainSrv.URL, "http://", "https://", 1),
		"plain to https srv": strings.Replace(tlsSrv.URL, "https://", "http://", 1),
	} {
		t.Run(name, func(t *testing.T) {
			l, err := New(testConfig("tls", addr))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err = l.Acquire(ctx)
			if !errors.Is(err, locker.ErrRefused) {
				t.Fatalf("Acquire: got %v, want ErrRefused", err)
			}
			t.Logf("Acquire: %v", err)
		})
	}
}

// TestUnreachableAgentIsRetryable: nobody listens; the error must come
// quickly and must not say refused, so the supervisor retries.
func TestUnreachableAgentIsRetryable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	l, err := New(testConfig("down", addr))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	start := time.Now()
	_, err = l.Acquire(context.Background())
	if err == nil || errors.Is(err, locker.ErrRefused) || errors.Is(err, locker.ErrHeld) {
		t.Fatalf("Acquire: got %v, want a retryable error", err)
	}
	if d := time.Since(start); d > callTimeout {
		t.Fatalf("Acquire took %v against a closed port", d)
	}
	if _, err := l.Leader(context.Background()); err == nil || errors.Is(err, locker.ErrNoLeader) {
		t.Fatalf("Leader: got %v, want a plain error", err)
	}
}

// TestSilentAgentCallsEndWithCtx: an agent that accepts connections and
// never answers (a frozen process) must not hold any call past its ctx.
func TestSilentAgentCallsEndWithCtx(t *testing.T) {
	silent := testsupport.SilentServer(t) // held open, never answered

	l, err := New(testConfig("silent", silent))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	calls := map[string]func(context.Context) error{
		"Acquire": func(ctx context.Context) error { _, err := l.Acquire(ctx); return err },
		"Renew": func(ctx context.Context) error {
			_, err := (&lease{l: l, session: "5f6c0d6e-1c3b-4b7e-9a59-8f1f0b7a1d2e"}).Renew(ctx)
			return err
		},
		"Leader":        func(ctx context.Context) error { _, err := l.Leader(ctx); return err },
		"ReleaseHandle": func(ctx context.Context) error { return l.ReleaseHandle(ctx, formatHandle("x", "k")) },
	}
	for name, call := range calls {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		start := time.Now()
		err := call(ctx)
		took := time.Since(start)
		cancel()
		if err == nil || errors.Is(err, locker.ErrLost) || errors.Is(err, locker.ErrRefused) {
			t.Errorf("%s against a silent agent: got %v, want a plain error", name, err)
		}
		if took > 300*time.Millisecond+createGrace+500*time.Millisecond { // far below callTimeout
			t.Errorf("%s took %v with a 300ms ctx", name, took)
		}
	}
}

func TestLockDelayRoundsUpToMilliseconds(t *testing.T) {
	for in, want := range map[time.Duration]time.Duration{
		0:                       0,
		time.Nanosecond:         time.Millisecond,
		1500 * time.Microsecond: 2 * time.Millisecond,
		time.Second:             time.Second,
	} {
		if got := ceilMillis(in); got != want {
			t.Errorf("ceilMillis(%v) = %v, want %v", in, got, want)
		}
	}
}
