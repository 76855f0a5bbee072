package etcd

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/records"
)

// DefaultEndpoint is used when Config.Endpoints is empty, as etcdctl does.
const DefaultEndpoint = "127.0.0.1:2379"

// DefaultPrefix is used when Options.Prefix is empty.
const DefaultPrefix = "leaderrun"

// defaultDialTimeout applies when Config.DialTimeout is zero.
const defaultDialTimeout = 5 * time.Second

// Config configures an etcd Locker.
type Config struct {
	locker.Options

	// Endpoints are client URLs (http://host:port, https://host:port) or
	// bare host:port pairs. With several, the client fails over between
	// them. Empty means DefaultEndpoint.
	Endpoints []string

	// Username and Password authenticate to etcd when auth is enabled. As
	// with etcdctl, Username may be given as "user:password".
	Username string
	Password string

	// CACert, Cert and Key are PEM file paths. Setting any of them turns on
	// TLS; Cert and Key go together (client certificate authentication).
	CACert string
	Cert   string
	Key    string

	// DialTimeout bounds connecting and authenticating, and each backend
	// call Acquire and Leader make on their own. Zero means 5s.
	DialTimeout time.Duration

	// Logger receives debug lines and warnings; nil discards them.
	Logger hclog.Logger
}

// Locker campaigns for one key in etcd. It implements locker.Locker. It
// connects lazily, on the first call that has a context to bound it, so that
// an unreachable cluster is an error worth retrying rather than a failure at
// start-up.
type Locker struct {
	// Core implements locker.Controls, locker.History and locker.RunLog
	// on the Locker's records.Store (records.go).
	*records.Core

	opts      locker.Options
	dir       string // "/<prefix>/<key>/@": every candidate key starts with it
	ttl       int64  // requested TTL in whole seconds, rounded up
	endpoints []endpoint
	tls       *tls.Config // nil for plaintext
	username  string
	password  string
	timeout   time.Duration
	log       hclog.Logger

	conn conn // the lazily dialled client, see connect.go

	ttlWarning sync.Once

	// onWake, when set by a test, is called each time a waiting candidate
	// wakes from watching its predecessor and re-checks who leads.
	onWake func()
}

var _ locker.Locker = (*Locker)(nil)

// endpoint is one validated etcd client address.
type endpoint struct {
	raw    string // as configured, passed to the etcd client
	host   string // host:port for probing
	scheme string // "http", "https" or "" for a bare host:port
}

// New validates cfg and returns a Locker. It does not contact etcd. A
// configuration that can never work (bad key, malformed endpoint, unreadable
// TLS files) yields a *locker.ConfigError, which wraps locker.ErrRefused;
// its Field names the Config field ("Options.Key" for the leadership key,
// which Config.Key, the TLS key file, shadows).
func New(cfg Config) (*Locker, error) {
	refuse := func(field, rule string, cause error) (*Locker, error) {
		return nil, &locker.ConfigError{Field: field, Rule: rule, Err: cause}
	}
	opts := cfg.Options
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if err := opts.ValidateName(); err != nil {
		return refuse("Options.Key", "is not a valid key", err)
	}
	if err := locker.ValidatePrefix(opts.Prefix); err != nil {
		return refuse("Prefix", "is not a valid prefix", err)
	}
	if opts.TTL <= 0 {
		return refuse("TTL", fmt.Sprintf("must be positive, got %s", opts.TTL), nil)
	}
	if opts.ID == "" {
		host, _ := os.Hostname()
		opts.ID = fmt.Sprintf("%s:%d", host, os.Getpid())
	}

	l := &Locker{
		opts:     opts,
		dir:      "/" + opts.Prefix + "/" + opts.Name() + "/@",
		ttl:      int64((opts.TTL + time.Second - 1) / time.Second),
		username: cfg.Username,
		password: cfg.Password,
		timeout:  cfg.DialTimeout,
		log:      cfg.Logger,
		conn:     conn{sem: make(chan struct{}, 1)},
	}
	if l.timeout <= 0 {
		l.timeout = defaultDialTimeout
	}
	if l.log == nil {
		l.log = hclog.NewNullLogger()
	}
	if l.password == "" {
		if user, pass, ok := strings.Cut(l.username, ":"); ok {
			l.username, l.password = user, pass
		}
	}
	if (l.username == "") != (l.password == "") {
		// The etcd client silently skips auth unless both are set.
		field := "Password"
		if l.username == "" {
			field = "Username"
		}
		return refuse(field, "must be set: a user name needs a password and a password needs a user name", nil)
	}

	raw := cfg.Endpoints
	if len(raw) == 0 {
		raw = []string{DefaultEndpoint}
	}
	scheme := ""
	for i, r := range raw {
		ep, err := parseEndpoint(r)
		if err != nil {
			return refuse("Endpoints", fmt.Sprintf("%q is not a valid endpoint", r), err)
		}
		// The etcd client applies the first endpoint's transport to all.
		if i > 0 && ep.scheme != scheme && ep.scheme != "" && scheme != "" {
			return refuse("Endpoints", "must not mix http:// and https://", nil)
		}
		if scheme == "" {
			scheme = ep.scheme
		}
		l.endpoints = append(l.endpoints, ep)
	}

	wantTLS := cfg.CACert != "" || cfg.Cert != "" || cfg.Key != ""
	if wantTLS && scheme == "http" {
		return refuse("Endpoints", "use http:// but TLS files are set; use https:// or host:port", nil)
	}
	if wantTLS || scheme == "https" {
		tc, err := loadTLS(cfg.CACert, cfg.Cert, cfg.Key)
		if err != nil {
			return nil, err
		}
		l.tls = tc
	}
	l.Core = newRecords(l)
	return l, nil
}

// parseEndpoint accepts http://host:port, https://host:port and host:port.
func parseEndpoint(raw string) (endpoint, error) {
	ep := endpoint{raw: raw}
	hostport := raw
	if strings.Contains(raw, "://") {
		u, err := url.Parse(raw)
		if err != nil {
			return ep, errors.New("not a URL")
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return ep, fmt.Errorf("scheme %q is not http or https", u.Scheme)
		}
		if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			return ep, errors.New("must be scheme://host:port with nothing else")
		}
		ep.scheme, hostport = u.Scheme, u.Host
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil || host == "" {
		return ep, errors.New("want host:port")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return ep, fmt.Errorf("port %q is not a number from 1 to 65535", port)
	}
	ep.host = hostport
	return ep, nil
}

// loadTLS reads and parses the PEM files now, so that a typo is a usage
// error at start-up rather than a handshake failure much later.
func loadTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, &locker.ConfigError{Field: "CACert", Rule: "must be a readable CA file", Err: err}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, &locker.ConfigError{Field: "CACert", Rule: fmt.Sprintf("%s: no PEM certificate found", caFile)}
		}
		tc.RootCAs = pool
	}
	if (certFile == "") != (keyFile == "") {
		return nil, &locker.ConfigError{Field: "Cert", Rule: "and the client key must be given together (client certificate and key)"}
	}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, &locker.ConfigError{Field: "Cert", Rule: fmt.Sprintf("must be a client certificate matching the key %s", keyFile), Err: err}
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}

// grpcWindow is the client's fixed gRPC flow-control window, per stream
// and per connection (clientConfig).
const grpcWindow = 1 << 20

// clientConfig is the etcd client configuration for this Locker.
func (l *Locker) clientConfig() clientv3.Config {
	eps := make([]string, len(l.endpoints))
	for i, ep := range l.endpoints {
		eps[i] = ep.raw
	}
	return clientv3.Config{
		Endpoints:   eps,
		DialTimeout: l.timeout,
		// Pings find a dead TCP connection so that the balancer moves to
		// another member; etcd refuses pings more often than every 5s.
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 3 * time.Second,
		AutoSyncInterval:     0, // talk only to the endpoints we were given
		TLS:                  l.tls,
		Username:             l.username,
		Password:             l.password,
		// The client's own logs would bypass our logger; our errors carry
		// what matters.
		Logger: zap.NewNop(),
		// Fixed flow-control windows: with gRPC's default, dynamic ones
		// the client sends a window update and a PING of its own after
		// every message it receives (bandwidth estimation), whose answer
		// wakes the process once more each renewal. Our messages are
		// small: 1 MiB lets any reply through at once, as before.
		DialOptions: []grpc.DialOption{
			grpc.WithInitialWindowSize(grpcWindow),
			grpc.WithInitialConnWindowSize(grpcWindow),
		},
	}
}
