//go:build linux

package cmdline

import (
	"time"

	"github.com/leaderrun/leaderrun/locker/zookeeper"

	"github.com/urfave/cli/v2"
)

// Option groups, in the order --help and the man page show them. A flag's
// Category must be one of these; a placeholder in its Usage is written
// between backquotes (urfave/cli's convention), its default comes from
// Value or DefaultText and is never repeated in Usage.
const (
	catLeadership = "Leadership"
	catTiming     = "Timing"
	catChild      = "Child"
	catOutput     = "Output"
	catQuery      = "Reading the backend"
	catConsul     = "Consul"
	catEtcd       = "etcd"
	catZooKeeper  = "ZooKeeper"
	catKubernetes = "Kubernetes"
	catLocal      = "Local backend"
	catOther      = "Other"
)

// categoryOrder is the reading order of the groups.
var categoryOrder = []string{catLeadership, catTiming, catChild, catOutput, catQuery,
	catConsul, catEtcd, catZooKeeper, catKubernetes, catLocal, catOther}

// categoryNote is a line printed under a group's title.
var categoryNote = map[string]string{
	catTiming: "renew-interval + kill-grace + safety-margin must be less than ttl",
}

// flagArg is the placeholder of an option whose Usage names none.
var flagArg = map[string]string{
	"backend": "NAME", "prefix": "PREFIX", "on-lost": "ACTION", "restart": "POLICY",
	"log-level": "LEVEL", "log-format": "FORMAT", "consul-datacenter": "NAME", "etcd-password": "PASSWORD",
}

// maxTTL bounds --ttl: a lease of more than a day is a typo (Consul's own
// limit is 24h), and a leader that dies would hold the key that long.
const maxTTL = 24 * time.Hour

// runFlags are the options of the run path only (DESIGN §2).
func runFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "id", Category: catLeadership, EnvVars: []string{"LEADERRUN_ID"}, DefaultText: "hostname:pid",
			Usage: "this candidate's `NAME` in logs and status"},
		&cli.DurationFlag{Name: "acquire-timeout", Category: catLeadership, EnvVars: []string{"LEADERRUN_ACQUIRE_TIMEOUT"},
			Usage: "give up (exit 124) when not leader after this long; 0 waits forever"},
		&cli.BoolFlag{Name: "no-wait", Category: catLeadership, EnvVars: []string{"LEADERRUN_NO_WAIT"},
			Usage: "one attempt: exit 124 (or --conflict-exit) if another holder leads, 125 if the backend cannot be reached"},
		&cli.IntFlag{Name: "conflict-exit", Category: catLeadership, EnvVars: []string{"LEADERRUN_CONFLICT_EXIT"}, DefaultText: "124 when held elsewhere, 0 when the slot already ran",
			Usage: "exit `CODE` when another holder leads or the slot already ran"},
		&cli.StringFlag{Name: "on-lost", Category: catLeadership, EnvVars: []string{"LEADERRUN_ON_LOST"}, Value: "exit",
			Usage: "after a loss: exit (with 123) or rejoin the campaign"},

		&cli.DurationFlag{Name: "ttl", Category: catTiming, EnvVars: []string{"LEADERRUN_TTL"}, Value: 15 * time.Second,
			Usage: "lease time asked of the backend, at most 24h; on the local backend: how long the job may run without a successful check of its lock file"},
		&cli.DurationFlag{Name: "renew-interval", Category: catTiming, EnvVars: []string{"LEADERRUN_RENEW_INTERVAL"}, DefaultText: "ttl/3",
			Usage: "time between renewals"},
		&cli.DurationFlag{Name: "kill-grace", Category: catTiming, EnvVars: []string{"LEADERRUN_KILL_GRACE"}, Value: 5 * time.Second,
			Usage: "time between the stop signal and SIGKILL"},
		&cli.DurationFlag{Name: "safety-margin", Category: catTiming, EnvVars: []string{"LEADERRUN_SAFETY_MARGIN"}, Value: time.Second,
			Usage: "the job is dead this long before the lease could expire"},

		&cli.StringFlag{Name: "stop-signal", Category: catChild, EnvVars: []string{"LEADERRUN_STOP_SIGNAL"}, Value: "SIGTERM",
			Usage: "first `SIGNAL` to the job: a name (TERM, SIGTERM) or number; not KILL, STOP, TSTP, TTIN, TTOU or CONT"},
		&cli.StringFlag{Name: "restart", Category: catChild, EnvVars: []string{"LEADERRUN_RESTART"}, Value: "never",
			Usage: "start the command again while leader: never, on-failure or always"},
		&cli.StringFlag{Name: "contain", Category: catChild, EnvVars: []string{"LEADERRUN_CONTAIN"}, Value: "auto",
			Usage: "how the job is held together: auto, cgroup (cgroup v2) or group (process group and sweep)"},
		&cli.BoolFlag{Name: "no-guard", Category: catChild, EnvVars: []string{"LEADERRUN_NO_GUARD"},
			Usage: "run the command without the dead-man guard (not recommended)"},
		&cli.DurationFlag{Name: "restart-delay", Category: catChild, EnvVars: []string{"LEADERRUN_RESTART_DELAY"}, Value: time.Second,
			Usage: "first restart delay, doubling up to 30s"},

		&cli.StringFlag{Name: "log-level", Category: catOutput, EnvVars: []string{"LEADERRUN_LOG_LEVEL"}, Value: "info",
			Usage: "trace, debug, info, warn, error, or off for no log lines at all"},
		&cli.StringFlag{Name: "log-format", Category: catOutput, EnvVars: []string{"LEADERRUN_LOG_FORMAT"}, Value: "text",
			Usage: "text or json"},
		&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Category: catOutput, EnvVars: []string{"LEADERRUN_QUIET"},
			Usage: "nothing on stderr unless something went wrong (a skip is not wrong)"},
		&cli.StringFlag{Name: "http-addr", Category: catOutput, EnvVars: []string{"LEADERRUN_HTTP_ADDR"},
			Usage: "serve /healthz, /status and /metrics on `HOST:PORT`; off when empty"},
	}
}

// backendFlags select and configure the backend; status and check use them
// too.
func backendFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "key", Category: catLeadership, EnvVars: []string{"LEADERRUN_KEY"},
			Usage: "the leadership `KEY` (required; see KEY below)"},
		&cli.StringFlag{Name: "backend", Category: catLeadership, EnvVars: []string{"LEADERRUN_BACKEND"}, Value: "consul",
			Usage: backendList()},
		&cli.StringFlag{Name: "prefix", Category: catLeadership, EnvVars: []string{"LEADERRUN_PREFIX"}, Value: "leaderrun",
			Usage: "namespace of leaderrun's keys on the backend"},

		&cli.StringFlag{Name: "consul-addr", Category: catConsul, EnvVars: []string{"CONSUL_HTTP_ADDR"}, DefaultText: "127.0.0.1:8500",
			Usage: "agent `ADDRESS`, or a comma-separated list of servers; https:// for TLS"},
		&cli.StringFlag{Name: "consul-token", Category: catConsul, EnvVars: []string{"CONSUL_HTTP_TOKEN"},
			Usage: "ACL `TOKEN` (prefer the file)"},
		&cli.StringFlag{Name: "consul-token-file", Category: catConsul, EnvVars: []string{"CONSUL_HTTP_TOKEN_FILE"},
			Usage: "`FILE` holding the ACL token"},
		&cli.StringFlag{Name: "consul-ca-file", Category: catConsul, EnvVars: []string{"CONSUL_CACERT"},
			Usage: "CA certificate `FILE`"},
		&cli.StringFlag{Name: "consul-client-cert", Category: catConsul, EnvVars: []string{"CONSUL_CLIENT_CERT"},
			Usage: "client certificate `FILE`"},
		&cli.StringFlag{Name: "consul-client-key", Category: catConsul, EnvVars: []string{"CONSUL_CLIENT_KEY"},
			Usage: "client key `FILE`"},
		&cli.StringFlag{Name: "consul-tls-server-name", Category: catConsul, EnvVars: []string{"CONSUL_TLS_SERVER_NAME"},
			Usage: "`NAME` to verify in the server's certificate"},
		&cli.StringFlag{Name: "consul-datacenter", Category: catConsul, EnvVars: []string{"CONSUL_DATACENTER"}, DefaultText: "the agent's",
			Usage: "Consul datacenter"},
		&cli.DurationFlag{Name: "consul-lock-delay", Category: catConsul, EnvVars: []string{"LEADERRUN_CONSUL_LOCK_DELAY"}, DefaultText: "ttl, at most 60s",
			Usage: "session lock-delay"},
		&cli.StringSliceFlag{Name: "consul-session-checks", Category: catConsul, EnvVars: []string{"LEADERRUN_CONSUL_SESSION_CHECKS"},
			Usage: "opt-in session health `CHECK` (repeatable; needs lock-delay >= ttl)"},

		&cli.StringFlag{Name: "etcd-endpoints", Category: catEtcd, EnvVars: []string{"ETCDCTL_ENDPOINTS"}, Value: "127.0.0.1:2379",
			Usage: "comma-separated `ENDPOINTS`"},
		&cli.StringFlag{Name: "etcd-user", Category: catEtcd, EnvVars: []string{"ETCDCTL_USER"},
			Usage: "`USER` or USER:PASSWORD"},
		&cli.StringFlag{Name: "etcd-password", Category: catEtcd, EnvVars: []string{"ETCDCTL_PASSWORD"},
			Usage: "password for --etcd-user"},
		&cli.StringFlag{Name: "etcd-cacert", Category: catEtcd, EnvVars: []string{"ETCDCTL_CACERT"},
			Usage: "CA certificate `FILE`"},
		&cli.StringFlag{Name: "etcd-cert", Category: catEtcd, EnvVars: []string{"ETCDCTL_CERT"},
			Usage: "client certificate `FILE`"},
		&cli.StringFlag{Name: "etcd-key", Category: catEtcd, EnvVars: []string{"ETCDCTL_KEY"},
			Usage: "client key `FILE`"},
		&cli.DurationFlag{Name: "etcd-dial-timeout", Category: catEtcd, EnvVars: []string{"ETCDCTL_DIAL_TIMEOUT"}, Value: 5 * time.Second,
			Usage: "time allowed to connect"},

		&cli.StringFlag{Name: "zk-servers", Category: catZooKeeper, EnvVars: []string{"LEADERRUN_ZK_SERVERS", "ZOOKEEPER_SERVERS"}, Value: zookeeper.DefaultServer,
			Usage: "comma-separated host:port `LIST`, optionally ending in a chroot (h1:2181,h2:2181/apps)"},
		&cli.StringFlag{Name: "zk-chroot", Category: catZooKeeper, EnvVars: []string{"LEADERRUN_ZK_CHROOT"},
			Usage: "znode `PATH` under which leaderrun works"},
		&cli.StringFlag{Name: "zk-auth", Category: catZooKeeper, EnvVars: []string{"LEADERRUN_ZK_AUTH"},
			Usage: "digest credentials `USER:PASSWORD`; znodes become creator-only"},

		&cli.StringFlag{Name: "kubeconfig", Category: catKubernetes, EnvVars: []string{"KUBECONFIG"}, DefaultText: "~/.kube/config, else the pod's service account",
			Usage: "kubeconfig `FILE` (several joined with : as in kubectl)"},
		&cli.StringFlag{Name: "k8s-context", Category: catKubernetes, EnvVars: []string{"LEADERRUN_K8S_CONTEXT"}, DefaultText: "the current one",
			Usage: "kubeconfig context"},
		&cli.StringFlag{Name: "k8s-namespace", Category: catKubernetes, EnvVars: []string{"LEADERRUN_K8S_NAMESPACE"}, DefaultText: "the context's, else the pod's own, else default",
			Usage: "namespace of the Lease"},

		&cli.StringFlag{Name: "lock-dir", Category: catLocal, EnvVars: []string{"LEADERRUN_LOCK_DIR"}, DefaultText: "/run/leaderrun for root",
			Usage: "lock `DIR`, an absolute path; /tmp/leaderrun-UID for other users, owner-checked"},
		&cli.StringFlag{Name: "state-dir", Category: catLocal, EnvVars: []string{"LEADERRUN_STATE_DIR"}, DefaultText: "--lock-dir unless tmpfs, else /var/lib/leaderrun for root, /var/tmp/leaderrun-UID for others",
			Usage: "absolute `DIR` keeping the run records and a copy of the epoch across reboots"},
	}
}

// commonFlags are on every command (urfave/cli adds --help itself).
func commonFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: envFileFlag, Category: catOther,
			Usage: "read VAR=value settings from `FILE`; they override the environment (repeatable)"},
	}
}

// versionFlag is the top level's --version.
func versionFlag() cli.Flag {
	return &cli.BoolFlag{Name: "version", Aliases: []string{"v"}, Category: catOther, Usage: "print the version"}
}
