// Package consul holds leadership of a key with a Consul session and a KV
// lock (DESIGN §1.1). The session carries only a TTL by default (§1.5); the
// supervisor renews it, with a heartbeat write of the key, one Renew at a
// time and keeps all deadlines itself (§1.2, §6). A standby takes over a
// holder whose heartbeat stopped for one TTL and an allowance (observe.go,
// §1.12); only the first standby in the queue of candidates follows the key
// (queue.go). Config.Address may list several servers; requests move to the
// next one when one fails (endpoints.go).
package consul

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/consul/acltoken"
	"github.com/leaderrun/leaderrun/locker/records"
)

// MinTTL is Consul's minimum session TTL (10s); New refuses a smaller TTL.
const MinTTL = 10 * time.Second

// MaxTTL is Consul's maximum session TTL (24h); New refuses a larger TTL.
const MaxTTL = 24 * time.Hour

// MaxLockDelay is the largest lock-delay Consul honours; servers silently
// clamp larger values, so New refuses them instead.
const MaxLockDelay = 60 * time.Second

// configError is a setting New (or the servers) refused: Field names the
// Config field, rule completes a sentence that starts with the setting.
// It wraps locker.ErrRefused, so leaderrun exits 125 (locker.ConfigError).
func configError(field, rule string, cause error) error {
	return &locker.ConfigError{Field: field, Rule: rule, Err: cause}
}

// Timeouts of the calls the backend makes on its own (the supervisor bounds
// Renew and Release through their ctx).
const (
	// callTimeout bounds one ordinary request: session create, acquire, a
	// consistent read, a standby renewal.
	callTimeout = 5 * time.Second
	// cleanupTimeout bounds destroying a session after Acquire gave up, on
	// a fresh context because the caller's is already done. With
	// createGrace it keeps a cancelled wait under 1s (DESIGN §3).
	cleanupTimeout = 700 * time.Millisecond
	// createGrace is how long a session create may still run after the
	// caller gave up, to learn the new session's ID and destroy it.
	createGrace = 200 * time.Millisecond
	// blockWait is how long one blocking query may wait on the server.
	blockWait = 20 * time.Second
	// dialTimeout bounds a TCP connect to the agent.
	dialTimeout = 5 * time.Second
)

// DialTimeout bounds connecting to the agent; a single attempt
// (--no-wait) gives up after it.
const DialTimeout = dialTimeout

// blockTimeout bounds one blocking query: Consul adds up to wait/16 of
// jitter to the wait it was asked for.
const blockTimeout = blockWait + blockWait/16 + callTimeout

// Config configures the Consul backend. Empty fields fall back to the
// consul/api defaults, which also read CONSUL_HTTP_* variables; explicit
// fields always win over the environment.
type Config struct {
	locker.Options

	// Address of the Consul agent or server: host:port, or a URL with
	// scheme http, https or unix. A comma-separated list names several
	// servers (or agents) of one datacenter: a request that fails on one
	// is retried on the next, and renewals, watches and blocking queries
	// all move together. Empty means CONSUL_HTTP_ADDR (which may hold a
	// list too), else the consul/api default (localhost:8500).
	Address string
	// Token is the ACL token. It never appears in errors or logs.
	Token string
	// TokenFile is a file holding the ACL token; it wins over Token.
	TokenFile string
	// CACert is a PEM file of CAs that verify the agent's certificate.
	CACert string
	// ClientCert and ClientKey are the PEM client certificate and key for
	// mutual TLS.
	ClientCert string
	ClientKey  string
	// TLSServerName is the name expected in the agent's certificate (SNI).
	TLSServerName string
	// Datacenter to use; empty means the agent's own.
	Datacenter string
	// LockDelay is the session lock-delay: after our session ends while
	// holding the key, Consul refuses the key to everyone for this long.
	// Zero means none. The CLI default is 1s. At most MaxLockDelay.
	LockDelay time.Duration
	// SessionChecks are node health checks (e.g. "serfHealth") to attach to
	// the session. Empty means TTL only (DESIGN §1.5); non-empty requires
	// LockDelay >= TTL.
	SessionChecks []string
	// Logger receives debug lines about the backend; nil discards them.
	Logger hclog.Logger
}

// Locker campaigns for one key with Consul sessions. It implements
// locker.Locker; create it with New.
type Locker struct {
	// Core implements locker.Controls, locker.History and locker.RunLog
	// on the Locker's records.Store (records.go).
	*records.Core

	ep        *endpoints
	transport *http.Transport
	token     string // per-request ACL token; never logged
	path      string // KV path of the lock key: <prefix>/<key>
	opts      locker.Options
	lockDelay time.Duration
	dc        string // Config.Datacenter, empty for the agent's own
	checks    []string
	log       hclog.Logger

	// attempts counts acquire transactions sent (tests read it).
	attempts atomic.Int64
}

var _ locker.Locker = (*Locker)(nil)

// New validates cfg and builds the Consul client. It makes no request.
// Configuration errors are *locker.ConfigError.
func New(cfg Config) (*Locker, error) {
	if err := validate(cfg); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if cfg.LockDelay < cfg.TTL {
		// An early invalidation (the agent's node deregistered) frees the
		// key after the lock-delay, possibly before this leader's deadline.
		log.Warn("--consul-lock-delay is shorter than --ttl: if Consul invalidates the session early (its node leaves or is reaped), a standby may start before this leader's child is stopped; only fencing with LEADER_EPOCH protects then",
			"lock_delay", cfg.LockDelay, "ttl", cfg.TTL)
	}
	token, err := resolveToken(cfg)
	if err != nil {
		return nil, err
	}

	acfg := api.DefaultConfigWithLogger(log)
	list := cfg.Address
	if list == "" {
		list = os.Getenv("CONSUL_HTTP_ADDR")
	}
	addrs := []string{acfg.Address}
	if list != "" {
		if addrs, err = splitAddresses(list); err != nil {
			return nil, configError("Address", "must be a comma-separated list of Consul addresses", err)
		}
	}
	if cfg.Datacenter != "" {
		acfg.Datacenter = cfg.Datacenter
	}
	if cfg.CACert != "" {
		acfg.TLSConfig.CAFile = cfg.CACert
		acfg.TLSConfig.CAPath = ""
	}
	if cfg.ClientCert != "" {
		acfg.TLSConfig.CertFile = cfg.ClientCert
	}
	if cfg.ClientKey != "" {
		acfg.TLSConfig.KeyFile = cfg.ClientKey
	}
	if cfg.TLSServerName != "" {
		acfg.TLSConfig.Address = cfg.TLSServerName
	}
	// The token also travels on every request, so an explicit one beats
	// whatever consul/api derives from the environment.
	acfg.Token, acfg.TokenFile = token, ""

	// Every call carries its own ctx; these bound what a ctx cannot see
	// coming: a dead address, a stuck handshake, a call without deadline.
	transport := acfg.Transport
	transport.DialContext = (&net.Dialer{Timeout: dialTimeout, KeepAlive: 15 * time.Second}).DialContext
	transport.TLSHandshakeTimeout = dialTimeout
	if err := checkTLSFiles(acfg.TLSConfig); err != nil {
		return nil, err
	}
	httpClient, err := api.NewHttpClient(transport, acfg.TLSConfig)
	if err != nil {
		return nil, configError("CACert", "and the client certificate must be readable PEM files", err)
	}
	httpClient.Timeout = blockTimeout + callTimeout
	acfg.HttpClient = httpClient

	ep := &endpoints{addrs: addrs, log: log, moved: make(chan struct{})}
	for _, a := range addrs {
		// Each address gets its own copy of the settings; TLS, token and
		// the HTTP client (one connection pool) are shared by all.
		one := *acfg
		one.Address = a
		client, err := api.NewClient(&one)
		if err != nil {
			return nil, configError("Address", fmt.Sprintf("%q is not a Consul address", a), errors.New(redact(err.Error(), token)))
		}
		ep.clients = append(ep.clients, client)
	}
	path := cfg.Name()
	if cfg.Prefix != "" {
		path = cfg.Prefix + "/" + cfg.Name()
	}
	opts := cfg.Options
	if opts.ID == "" {
		host, _ := os.Hostname()
		opts.ID = host + ":" + strconv.Itoa(os.Getpid())
	}
	l := &Locker{
		ep:        ep,
		transport: transport,
		token:     token,
		path:      path,
		opts:      opts,
		lockDelay: ceilMillis(cfg.LockDelay),
		dc:        cfg.Datacenter,
		checks:    append([]string(nil), cfg.SessionChecks...),
		log:       log,
	}
	l.Core = newRecords(l)
	return l, nil
}

// validate checks the rules of DESIGN §1.5 and §1.10 that belong to Consul.
func validate(cfg Config) error {
	if err := locker.CheckKey(cfg.Options); err != nil {
		return err
	}
	if cfg.TTL < MinTTL || cfg.TTL > MaxTTL {
		return configError("TTL", fmt.Sprintf("must be between %v and %v on Consul (its session TTL limits), got %v",
			MinTTL, MaxTTL, cfg.TTL), nil)
	}
	if cfg.LockDelay < 0 || cfg.LockDelay > MaxLockDelay {
		return configError("LockDelay", fmt.Sprintf("must be between 0 and %v (Consul clamps longer ones), got %v",
			MaxLockDelay, cfg.LockDelay), nil)
	}
	// §1.5: a health check can invalidate the session before our local
	// deadline; only a lock-delay of at least TTL keeps the next holder out
	// until our child is surely dead.
	if len(cfg.SessionChecks) > 0 && cfg.LockDelay < cfg.TTL {
		return configError("SessionChecks", fmt.Sprintf("%s need a lock-delay of at least the TTL (DESIGN §1.5), have lock-delay %v < TTL %v",
			strings.Join(cfg.SessionChecks, ","), cfg.LockDelay, cfg.TTL), nil)
	}
	for _, c := range cfg.SessionChecks {
		if c == "" {
			return configError("SessionChecks", "must not contain an empty check name", nil)
		}
	}
	return nil
}

// ceilMillis rounds d up to whole milliseconds, the unit Consul takes a
// lock-delay in; rounding up keeps the lock-delay >= TTL rule true.
func ceilMillis(d time.Duration) time.Duration {
	return (d + time.Millisecond - 1).Truncate(time.Millisecond)
}

// resolveToken applies Consul's own precedence (acltoken.Read) and refuses an
// unreadable or empty token file.
func resolveToken(cfg Config) (string, error) {
	t, file, err := acltoken.Read(cfg.TokenFile, cfg.Token)
	if err != nil {
		return "", configError("TokenFile", "must be a readable file", err)
	}
	if file != "" && t == "" {
		return "", configError("TokenFile", fmt.Sprintf("%s is empty", file), nil)
	}
	return t, nil
}

// Close frees idle connections. It does not release a held lease.
func (l *Locker) Close() error {
	l.transport.CloseIdleConnections()
	return nil
}

// queryOpts returns read options bound to ctx and carrying the token.
func (l *Locker) queryOpts(ctx context.Context, consistent bool) *api.QueryOptions {
	q := &api.QueryOptions{Token: l.token, RequireConsistent: consistent}
	return q.WithContext(ctx)
}

// writeOpts returns write options bound to ctx and carrying the token.
func (l *Locker) writeOpts(ctx context.Context) *api.WriteOptions {
	w := &api.WriteOptions{Token: l.token}
	return w.WithContext(ctx)
}

// checkTLSFiles reads the CA and client certificate files, so that a bad
// one is named by its own setting.
func checkTLSFiles(tc api.TLSConfig) error {
	if tc.CAFile != "" {
		pem, err := os.ReadFile(tc.CAFile)
		if err != nil {
			return configError("CACert", "must be a readable PEM file of CA certificates", err)
		}
		if !x509.NewCertPool().AppendCertsFromPEM(pem) {
			return configError("CACert", fmt.Sprintf("%s holds no PEM certificate", tc.CAFile), nil)
		}
	}
	if tc.CertFile != "" || tc.KeyFile != "" {
		if tc.CertFile == "" || tc.KeyFile == "" {
			return configError("ClientCert", "and the client key must be given together", nil)
		}
		if _, err := tls.LoadX509KeyPair(tc.CertFile, tc.KeyFile); err != nil {
			return configError("ClientCert", "and the client key must be a matching PEM certificate and key", err)
		}
	}
	return nil
}
