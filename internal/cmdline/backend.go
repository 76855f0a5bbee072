//go:build linux

package cmdline

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/consul"
	"github.com/leaderrun/leaderrun/locker/etcd"
	"github.com/leaderrun/leaderrun/locker/kubernetes"
	"github.com/leaderrun/leaderrun/locker/local"
	"github.com/leaderrun/leaderrun/locker/zookeeper"
)

// backendNames lists every backend --backend accepts, in the order help,
// completions and errors name them.
var backendNames = []string{"consul", "etcd", "zookeeper", "kubernetes", "local"}

// backendList names the backends as prose: "consul, etcd, ... or local".
func backendList() string {
	n := len(backendNames)
	return strings.Join(backendNames[:n-1], ", ") + " or " + backendNames[n-1]
}

// backendSpec is the chosen backend and its settings, as given by flags and
// environment. It is what the dead-man guard receives (as JSON, over its
// private pipe) to build the same backend and release a lease.
type backendSpec struct {
	Backend  string         `json:"backend"`
	Options  locker.Options `json:"options"`
	LockDir  string         `json:"lock_dir,omitempty"`
	StateDir string         `json:"state_dir,omitempty"`
	// ReadOnly opens the backend for status and check: nothing is created.
	ReadOnly bool `json:"read_only,omitempty"`

	ConsulAddr          string        `json:"consul_addr,omitempty"`
	ConsulToken         string        `json:"consul_token,omitempty"`
	ConsulTokenFile     string        `json:"consul_token_file,omitempty"`
	ConsulCACert        string        `json:"consul_ca_file,omitempty"`
	ConsulClientCert    string        `json:"consul_client_cert,omitempty"`
	ConsulClientKey     string        `json:"consul_client_key,omitempty"`
	ConsulTLSServerName string        `json:"consul_tls_server_name,omitempty"`
	ConsulDatacenter    string        `json:"consul_datacenter,omitempty"`
	ConsulLockDelay     time.Duration `json:"consul_lock_delay,omitempty"`
	ConsulChecks        []string      `json:"consul_session_checks,omitempty"`

	EtcdEndpoints   []string      `json:"etcd_endpoints,omitempty"`
	EtcdUser        string        `json:"etcd_user,omitempty"`
	EtcdPassword    string        `json:"etcd_password,omitempty"`
	EtcdCACert      string        `json:"etcd_cacert,omitempty"`
	EtcdCert        string        `json:"etcd_cert,omitempty"`
	EtcdKey         string        `json:"etcd_key,omitempty"`
	EtcdDialTimeout time.Duration `json:"etcd_dial_timeout,omitempty"`

	ZKServers []string `json:"zk_servers,omitempty"`
	ZKChroot  string   `json:"zk_chroot,omitempty"`
	ZKAuth    string   `json:"zk_auth,omitempty"`
	// ZKSafetyMargin is --safety-margin, which the ZooKeeper backend checks
	// against the ensemble's tickTime when it first campaigns (the guard
	// never campaigns, so it is not sent).
	ZKSafetyMargin time.Duration `json:"-"`

	K8sNamespace  string `json:"k8s_namespace,omitempty"`
	K8sKubeconfig string `json:"kubeconfig,omitempty"`
	K8sContext    string `json:"k8s_context,omitempty"`

	// How the small guard reaches the API server, as the kubeconfig or the
	// pod's service account resolved (kubernetes.Connection); set only
	// when a plain HTTPS client can do it (withConnection).
	K8sServer        string `json:"k8s_server,omitempty"`
	K8sCAData        string `json:"k8s_ca_data,omitempty"`
	K8sCAFile        string `json:"k8s_ca_file,omitempty"`
	K8sCertData      string `json:"k8s_cert_data,omitempty"`
	K8sKeyData       string `json:"k8s_key_data,omitempty"`
	K8sCertFile      string `json:"k8s_cert_file,omitempty"`
	K8sKeyFile       string `json:"k8s_key_file,omitempty"`
	K8sToken         string `json:"k8s_token,omitempty"`
	K8sTokenFile     string `json:"k8s_token_file,omitempty"`
	K8sTLSServerName string `json:"k8s_tls_server_name,omitempty"`
	K8sInsecure      bool   `json:"k8s_insecure,omitempty"`

	// fullGuardWhy says why the small guard cannot release this lease
	// itself (never sent to the guard).
	fullGuardWhy string
}

// specFromCLI reads the backend flags.
func specFromCLI(c *cli.Context, opts locker.Options) backendSpec {
	return backendSpec{
		Backend:  c.String("backend"),
		Options:  opts,
		LockDir:  c.String("lock-dir"),
		StateDir: c.String("state-dir"),

		ConsulAddr:          c.String("consul-addr"),
		ConsulToken:         c.String("consul-token"),
		ConsulTokenFile:     c.String("consul-token-file"),
		ConsulCACert:        c.String("consul-ca-file"),
		ConsulClientCert:    c.String("consul-client-cert"),
		ConsulClientKey:     c.String("consul-client-key"),
		ConsulTLSServerName: c.String("consul-tls-server-name"),
		ConsulDatacenter:    c.String("consul-datacenter"),
		ConsulLockDelay:     consulLockDelay(c, opts.TTL),
		ConsulChecks:        c.StringSlice("consul-session-checks"),

		EtcdEndpoints:   splitList(c.String("etcd-endpoints")),
		EtcdUser:        c.String("etcd-user"),
		EtcdPassword:    c.String("etcd-password"),
		EtcdCACert:      c.String("etcd-cacert"),
		EtcdCert:        c.String("etcd-cert"),
		EtcdKey:         c.String("etcd-key"),
		EtcdDialTimeout: c.Duration("etcd-dial-timeout"),

		ZKServers: splitList(c.String("zk-servers")),
		ZKChroot:  c.String("zk-chroot"),
		ZKAuth:    c.String("zk-auth"),
		// Commands without the flag (status, check) read 0: no check.
		ZKSafetyMargin: c.Duration("safety-margin"),

		K8sNamespace:  c.String("k8s-namespace"),
		K8sKubeconfig: c.String("kubeconfig"),
		K8sContext:    c.String("k8s-context"),
	}
}

// newLocker builds the backend chosen by the flags.
func newLocker(c *cli.Context, opts locker.Options, log hclog.Logger) (locker.Locker, error) {
	return specFromCLI(c, opts).newLocker(log)
}

// newLocker builds the backend the spec names.
func (s backendSpec) newLocker(log hclog.Logger) (locker.Locker, error) {
	switch s.Backend {
	case "local":
		lk, err := local.New(local.Config{Options: s.Options, Dir: s.LockDir, StateDir: s.StateDir, ReadOnly: s.ReadOnly})
		if err != nil {
			return nil, err
		}
		return lk, nil
	case "etcd":
		return etcd.New(etcd.Config{
			Options:     s.Options,
			Endpoints:   s.EtcdEndpoints,
			Username:    s.EtcdUser,
			Password:    s.EtcdPassword,
			CACert:      s.EtcdCACert,
			Cert:        s.EtcdCert,
			Key:         s.EtcdKey,
			DialTimeout: s.EtcdDialTimeout,
			Logger:      log.Named("etcd"),
		})
	case "consul":
		return consul.New(consul.Config{
			Options:       s.Options,
			Address:       s.ConsulAddr,
			Token:         s.ConsulToken,
			TokenFile:     s.ConsulTokenFile,
			CACert:        s.ConsulCACert,
			ClientCert:    s.ConsulClientCert,
			ClientKey:     s.ConsulClientKey,
			TLSServerName: s.ConsulTLSServerName,
			Datacenter:    s.ConsulDatacenter,
			LockDelay:     s.ConsulLockDelay,
			SessionChecks: s.ConsulChecks,
			Logger:        log.Named("consul"),
		})
	case "zookeeper":
		l, err := zookeeper.New(zookeeper.Config{
			Options: s.Options,
			Servers: s.ZKServers,
			Chroot:  s.ZKChroot,
			Auth:    s.ZKAuth,
			Logger:  log.Named("zookeeper"),

			SafetyMargin: s.ZKSafetyMargin,
		})
		return l, err
	case "kubernetes":
		l, err := kubernetes.New(kubernetes.Config{
			Options:    s.Options,
			Namespace:  s.K8sNamespace,
			Kubeconfig: s.K8sKubeconfig,
			Context:    s.K8sContext,
			Logger:     log.Named("kubernetes"),
		})
		return l, err
	default:
		return nil, fmt.Errorf("--backend must be %s, got %q", backendList(), s.Backend)
	}
}

// withConnection adds to the spec how lk, once built, reaches its server,
// where the small guard needs it to release by itself: the Kubernetes
// connection that kubeconfig or the service account resolved to (the
// guard cannot read a kubeconfig). It is left out, and the guard is then
// leaderrun itself, when a plain HTTPS client cannot act as that user.
// The credentials travel only in the guard's hello, over its pipe.
func (s backendSpec) withConnection(lk locker.Locker) backendSpec {
	for lk != nil {
		if kl, ok := lk.(*kubernetes.Locker); ok {
			conn, err := kl.Connection()
			if err != nil {
				s.fullGuardWhy = err.Error()
				return s
			}
			s.K8sServer = conn.Server
			s.K8sCAData, s.K8sCAFile = string(conn.CAData), conn.CAFile
			s.K8sCertData, s.K8sKeyData = string(conn.CertData), string(conn.KeyData)
			s.K8sCertFile, s.K8sKeyFile = conn.CertFile, conn.KeyFile
			s.K8sToken, s.K8sTokenFile = conn.Token, conn.TokenFile
			s.K8sTLSServerName, s.K8sInsecure = conn.ServerName, conn.Insecure
			return s
		}
		u, ok := lk.(interface{ Unwrap() locker.Locker })
		if !ok {
			return s
		}
		lk = u.Unwrap()
	}
	return s
}

// encode is the spec as the guard's hello payload.
func (s backendSpec) encode() []byte {
	b, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("encode backend spec: %v", err)) // plain data cannot fail
	}
	return b
}

// consulLockDelay is --consul-lock-delay, by default the TTL (at most
// Consul's 60s). Consul can invalidate a session early, whatever its checks:
// deregistering the node it was created through (a leaving or reaped agent)
// destroys it. The old leader may learn of it only at its own deadline, at
// most a TTL after its last renewal; a lock-delay that long keeps the key
// from everyone until then (DESIGN §1.5, applied to every session). A clean
// release frees the key without any lock-delay, so handovers stay fast.
func consulLockDelay(c *cli.Context, ttl time.Duration) time.Duration {
	if c.IsSet("consul-lock-delay") {
		return c.Duration("consul-lock-delay")
	}
	return min(ttl, consul.MaxLockDelay)
}
