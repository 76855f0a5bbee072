package kubernetes

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/records"
)

// DefaultPrefix is used when Options.Prefix is empty.
const DefaultPrefix = "leaderrun"

// defaultTimeout bounds each backend call Acquire and Leader make on their
// own when Config.Timeout is zero.
const defaultTimeout = 5 * time.Second

// Config configures a Kubernetes Locker.
type Config struct {
	locker.Options

	// Namespace holds the Lease. Empty means the namespace of the kubeconfig
	// context, else the pod's own namespace (from its service-account
	// mount) when running in a pod, else "default".
	Namespace string

	// Kubeconfig is the path of a kubeconfig file (several joined with ':'
	// as in KUBECONFIG). Empty means the KUBECONFIG environment variable,
	// else ~/.kube/config, else the in-cluster service account (whose token
	// file is re-read as the kubelet rotates it).
	Kubeconfig string

	// Context picks a kubeconfig context; empty means the current one.
	Context string

	// Timeout bounds each call Acquire and Leader make on their own. Zero
	// means 5s.
	Timeout time.Duration

	// Logger receives debug lines and warnings; nil discards them.
	Logger hclog.Logger

	// rest, when set by a test, replaces the configuration Kubeconfig and
	// Context would load.
	rest *rest.Config
}

// Locker campaigns for one key in a Kubernetes Lease. It implements
// locker.Locker.
type Locker struct {
	// Core implements locker.Controls, locker.History and locker.RunLog
	// on the Locker's records.Store (records.go).
	*records.Core

	opts      locker.Options
	namespace string
	name      string // the Lease, see LeaseName
	ttl       time.Duration
	timeout   time.Duration
	host      string // where the server is, for messages
	tokenFile bool   // the credential is a file the client re-reads
	client    *leaseClient
	rest      *rest.Config
	log       hclog.Logger

	// conn is how the server is reached, for the guard; connErr says why a
	// plain HTTPS client cannot (see Connection).
	conn    Connection
	connErr error

	// onObserve, when set by a test, is called each time a waiting
	// candidate reads the holder's Lease.
	onObserve func()

	// attempts counts the writes sent to take the Lease (tests read it).
	attempts atomic.Int64
}

var _ locker.Locker = (*Locker)(nil)

// New validates cfg, loads the client configuration and returns a Locker.
// It does not contact the server. A configuration that can never work (bad
// key, missing or unreadable kubeconfig, unknown context) yields a
// *locker.ConfigError.
func New(cfg Config) (*Locker, error) {
	opts := cfg.Options
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if err := opts.ValidateName(); err != nil {
		return nil, refuse("Key", err.Error(), nil)
	}
	if err := locker.ValidatePrefix(opts.Prefix); err != nil {
		return nil, refuse("Prefix", err.Error(), nil)
	}
	name, err := LeaseName(opts.Prefix, opts.Name())
	if err != nil {
		return nil, refuse("Key", err.Error(), nil)
	}
	if opts.TTL < time.Second {
		return nil, refuse("TTL", fmt.Sprintf("must be at least 1s (a Lease counts whole seconds), got %s", opts.TTL), nil)
	}
	if opts.ID == "" {
		host, _ := os.Hostname()
		opts.ID = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	if len(opts.ID) > 253 {
		return nil, refuse("ID", "must be at most 253 characters to fit a Lease's holderIdentity", nil)
	}

	l := &Locker{opts: opts, name: name, ttl: opts.TTL, timeout: cfg.Timeout, log: cfg.Logger}
	if l.timeout <= 0 {
		l.timeout = defaultTimeout
	}
	if l.log == nil {
		l.log = hclog.NewNullLogger()
	}

	rc, ns := cfg.rest, cfg.Namespace
	if rc == nil {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		if paths := splitPaths(cfg.Kubeconfig); len(paths) == 1 {
			rules.ExplicitPath = paths[0] // must exist, unlike a list's entries
		} else if len(paths) > 1 {
			rules.Precedence = paths
		}
		cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: cfg.Context})
		rc, err = cc.ClientConfig()
		if err != nil {
			if clientcmd.IsEmptyConfig(err) {
				return nil, refuse("Kubeconfig", "no Kubernetes configuration found: give a kubeconfig file or run in a pod with a service account", nil)
			}
			return nil, refuse("Kubeconfig", "cannot be loaded", errors.New(oneLine(err.Error())))
		}
		if ns == "" {
			if ns, _, err = cc.Namespace(); err != nil {
				return nil, refuse("Namespace", "cannot be read from the kubeconfig", err)
			}
		}
	}
	if ns == "" {
		ns = "default"
	}
	l.namespace = ns
	l.conn, l.connErr = connectionOf(rc)
	rc = rest.CopyConfig(rc)
	rc.UserAgent = "leaderrun"
	// Our own timeouts bound every call (DESIGN §1.8); the client's
	// rate limiter must never delay a renewal.
	rc.QPS, rc.Burst = -1, 0
	rc.RateLimiter = nil
	if path := rc.BearerTokenFile; path != "" {
		l.tokenFile = true
		rc.BearerToken, rc.BearerTokenFile = "", ""
		wrap := rc.WrapTransport
		rc.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			if wrap != nil {
				rt = wrap(rt)
			}
			return &fileToken{path: path, next: rt}
		}
	}
	l.host = rc.Host
	l.rest = rc
	if l.client, err = newLeaseClient(rc, ns); err != nil {
		return nil, refuse("Kubeconfig", "gives no usable client", err)
	}
	l.Core = newRecords(l)
	return l, nil
}

// Namespace is the namespace that holds the Lease.
func (l *Locker) Namespace() string { return l.namespace }

// Name is the Lease's name.
func (l *Locker) Name() string { return l.name }

// Close frees nothing: the client holds only idle HTTP connections. It does
// not release a held lease.
func (l *Locker) Close() error { return nil }

func refuse(field, rule string, cause error) error {
	return fmt.Errorf("kubernetes: %w", &locker.ConfigError{Field: field, Rule: rule, Err: cause})
}

func splitPaths(s string) []string {
	var out []string
	for _, p := range filepath.SplitList(s) {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}
