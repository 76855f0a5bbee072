//go:build linux

package bench

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leaderrun/leaderrun/tests/chaos"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// Contender is one lock tool in one configuration: leaderrun, or a rival
// that also runs a command while it holds a lock.
type Contender struct {
	// Tool is "leaderrun", "etcdctl lock", "consul lock" or "k8s
	// leaderelection" (k8slock: client-go's leader election on a Lease).
	Tool string
	// Config says how it is set up, e.g. "--ttl 3 (matched)".
	Config string
	// Backend is "etcd", "consul", "zookeeper", "kubernetes", "postgres"
	// or "dynamodb".
	Backend string
	// TTL is the lease or session TTL in effect.
	TTL time.Duration
	// LockDelay is the Consul lock-delay in effect; zero on etcd.
	LockDelay time.Duration
	// Leaderrun marks leaderrun itself: it has a guard and logs renewals.
	Leaderrun bool
	// MaxScale caps the scale runs (0: no cap); NoScale leaves them out.
	MaxScale int
	NoScale  bool

	argv func(e *Env, lock, id string, addrs []string) (string, []string)
	// members lists the candidates the backend knows; nil on a Kubernetes
	// Lease or a PostgreSQL lease row, which name their holder only: there
	// a candidate counts once it is connected to the server (Lane.members).
	members  func(e *Env, lock string) ([]string, error)
	blocking func(lock, line string) bool
	// backend, when set, is the contender's own backend, outside Env's
	// (the breakdown's DynamoDB and local lock directory).
	backend chaos.Cluster
}

// Name is the contender as the report names it.
func (c *Contender) Name() string { return c.Tool + " " + c.Config }

// Contenders returns every contender, in report order: per backend,
// leaderrun first, then its rivals with their defaults and with the TTL
// matched to leaderrun's where they allow it.
func Contenders() []*Contender {
	et, ct := chaos.EtcdTiming, chaos.ConsulTiming
	return []*Contender{
		{
			Tool: "leaderrun", Config: "(etcd, ttl 3s)", Backend: "etcd", TTL: et.TTL, Leaderrun: true,
			argv: func(e *Env, lock, id string, addrs []string) (string, []string) {
				args := append(chaos.Etcd{}.LeaderrunArgs(addrs), et.Args()...)
				return e.Bins.Leaderrun, append(args, "--key", lock, "--id", id, "--log-level", "debug", "--", e.Bins.Writer)
			},
			members: func(e *Env, lock string) ([]string, error) { return e.etcdKeys("/leaderrun/" + lock + "/@") },
		},
		{
			Tool: "etcdctl lock", Config: "(defaults: ttl 10s)", Backend: "etcd", TTL: 10 * time.Second,
			NoScale: true, // the matched etcdctl stands for both in the scale runs
			argv:    etcdctlArgv(0),
			members: func(e *Env, lock string) ([]string, error) { return e.etcdKeys(lock + "/") },
		},
		{
			Tool: "etcdctl lock", Config: "(--ttl 3, matched)", Backend: "etcd", TTL: 3 * time.Second,
			argv:    etcdctlArgv(3),
			members: func(e *Env, lock string) ([]string, error) { return e.etcdKeys(lock + "/") },
		},
		{
			Tool: "leaderrun", Config: "(consul, ttl 10s)", Backend: "consul", TTL: ct.TTL, LockDelay: ct.LockDelay, Leaderrun: true,
			argv: func(e *Env, lock, id string, addrs []string) (string, []string) {
				args := append(chaos.Consul{}.LeaderrunArgs(addrs), ct.Args()...)
				return e.Bins.Leaderrun, append(args, "--key", lock, "--id", id, "--log-level", "debug", "--", e.Bins.Writer)
			},
			members: func(e *Env, lock string) ([]string, error) {
				return e.consulSessions("leaderrun leaderrun/" + lock + " [observer-clock/1]")
			},
			blocking: func(lock, line string) bool {
				return strings.Contains(line, "/v1/kv/leaderrun/"+lock+"?") && strings.Contains(line, "index=")
			},
		},
		{
			// consul lock has no flag for its session TTL (15s) or
			// lock-delay (15s); its defaults are all there is. It runs the
			// command through $SHELL -c.
			Tool: "consul lock", Config: "(defaults: ttl 15s, lock-delay 15s)", Backend: "consul", TTL: 15 * time.Second, LockDelay: 15 * time.Second,
			MaxScale: 10,
			argv:     consulLockArgv(true),
			members:  func(e *Env, lock string) ([]string, error) { return e.consulSessions(lock) },
			blocking: consulLockBlocking,
		},
		{
			// The same without the shell, so its signals reach the command
			// itself: what consul lock does when nothing is in the way.
			Tool: "consul lock", Config: "(-shell=false)", Backend: "consul", TTL: 15 * time.Second, LockDelay: 15 * time.Second,
			NoScale:  true,
			argv:     consulLockArgv(false),
			members:  func(e *Env, lock string) ([]string, error) { return e.consulSessions(lock) },
			blocking: consulLockBlocking,
		},
		{
			// ZooKeeper has no lock tool of its own to compare with.
			Tool: "leaderrun", Config: "(zookeeper, ttl 3s)", Backend: "zookeeper", TTL: chaos.ZooKeeperTiming.TTL, Leaderrun: true,
			argv:    leaderrunArgv(chaos.ZooKeeper{}, chaos.ZooKeeperTiming),
			members: func(e *Env, lock string) ([]string, error) { return e.zkCandidates("/leaderrun/" + lock) },
		},
		{
			Tool: "leaderrun", Config: "(kubernetes, ttl 3s)", Backend: "kubernetes", TTL: chaos.KubeTiming.TTL, Leaderrun: true,
			argv: func(e *Env, lock, id string, addrs []string) (string, []string) {
				args := append(e.Kube.LeaderrunArgs(addrs), chaos.KubeTiming.Args()...)
				return e.Bins.Leaderrun, append(args, "--key", lock, "--id", id, "--log-level", "debug", "--", e.Bins.Writer)
			},
		},
		{
			// client-go's leaderelection on a LeaseLock, as operators use
			// it (k8slock): it starts the command when it starts leading
			// and exits when it stops, leaving the command running.
			Tool: "k8s leaderelection", Config: "(defaults: lease 15s, renew 10s, retry 2s)", Backend: "kubernetes", TTL: K8sDefaults.Lease,
			NoScale: true, // the matched one stands for both in the scale runs
			argv:    k8slockArgv(K8sDefaults),
		},
		{
			Tool: "k8s leaderelection", Config: "(lease 3s, matched)", Backend: "kubernetes", TTL: K8sMatched.Lease,
			argv: k8slockArgv(K8sMatched),
		},
		{
			// PostgreSQL has no lock tool that runs a command to set
			// against it.
			Tool: "leaderrun", Config: "(postgres, ttl 3s)", Backend: "postgres", TTL: chaos.PostgresTiming.TTL, Leaderrun: true,
			argv: leaderrunArgv(chaos.Postgres{}, chaos.PostgresTiming),
		},
		{
			// Nor has DynamoDB.
			Tool: "leaderrun", Config: "(dynamodb, ttl 3s)", Backend: "dynamodb", TTL: chaos.DynamoDBTiming.TTL, Leaderrun: true,
			argv: leaderrunArgv(chaos.DynamoDB{}, chaos.DynamoDBTiming),
		},
	}
}

// leaderrunArgv runs leaderrun on cl's backend with timing tm, the
// writer as its child.
func leaderrunArgv(cl chaos.Cluster, tm chaos.Timing) func(e *Env, lock, id string, addrs []string) (string, []string) {
	return func(e *Env, lock, id string, addrs []string) (string, []string) {
		args := append(cl.LeaderrunArgs(addrs), tm.Args()...)
		return e.Bins.Leaderrun, append(args, "--key", lock, "--id", id, "--log-level", "debug", "--", e.Bins.Writer)
	}
}

// K8sTiming is a client-go leader election's timeline.
type K8sTiming struct{ Lease, Renew, Retry time.Duration }

// Args renders the timing as k8slock flags.
func (tm K8sTiming) Args() []string {
	return []string{"-lease-duration", tm.Lease.String(), "-renew-deadline", tm.Renew.String(), "-retry-period", tm.Retry.String()}
}

var (
	// K8sDefaults are the durations client-go's users are told to start
	// from (and kube-controller-manager's defaults).
	K8sDefaults = K8sTiming{Lease: 15 * time.Second, Renew: 10 * time.Second, Retry: 2 * time.Second}
	// K8sMatched has leaderrun's 3s TTL as its lease duration, and the
	// defaults' renew deadline and retry period scaled by the same factor
	// (1/5), so that client-go's ratios hold: lease > renew deadline >
	// 1.2 x retry period.
	K8sMatched = K8sTiming{Lease: 3 * time.Second, Renew: 2 * time.Second, Retry: 400 * time.Millisecond}
)

// k8slockArgv runs k8slock with timing tm, through a kubeconfig that
// reaches the server through the candidate's proxy.
func k8slockArgv(tm K8sTiming) func(e *Env, lock, id string, addrs []string) (string, []string) {
	return func(e *Env, lock, id string, addrs []string) (string, []string) {
		cfg := e.Kube.KubeconfigAt(e.T, addrs[0], e.Kube.Token(testcluster.KubeAdmin), "default")
		args := append([]string{"-kubeconfig", cfg, "-namespace", "default", "-lease", lock, "-identity", id}, tm.Args()...)
		return e.K8sLock, append(args, "--", e.Bins.Writer)
	}
}

// consulLockArgv runs `consul lock`, through the shell or not.
func consulLockArgv(shell bool) func(e *Env, lock, id string, addrs []string) (string, []string) {
	return func(e *Env, lock, id string, addrs []string) (string, []string) {
		args := []string{"lock", "-http-addr=" + addrs[0], "-name=" + lock}
		if !shell {
			args = append(args, "-shell=false")
		}
		return e.Consul, append(args, lock, e.Bins.Writer)
	}
}

// consulLockBlocking recognises consul lock's blocking read of its lock key.
func consulLockBlocking(lock, line string) bool {
	return strings.Contains(line, "/v1/kv/"+lock+"/.lock?") && strings.Contains(line, "index=")
}

// etcdctlArgv runs `etcdctl lock`, with --ttl when ttl > 0.
func etcdctlArgv(ttl int) func(e *Env, lock, id string, addrs []string) (string, []string) {
	return func(e *Env, lock, id string, addrs []string) (string, []string) {
		args := []string{"--endpoints=" + strings.Join(addrs, ","), "lock"}
		if ttl > 0 {
			args = append(args, fmt.Sprintf("--ttl=%d", ttl))
		}
		return e.Etcdctl, append(args, lock, e.Bins.Writer)
	}
}

// httpClient reads the backends' state for readiness checks.
var httpClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}

// etcdKeys lists the keys under prefix through etcd's JSON gateway: the
// candidates of one lock.
func (e *Env) etcdKeys(prefix string) ([]string, error) {
	end := []byte(prefix)
	end[len(end)-1]++
	body, _ := json.Marshal(map[string]any{
		"key":       base64.StdEncoding.EncodeToString([]byte(prefix)),
		"range_end": base64.StdEncoding.EncodeToString(end),
		"keys_only": true,
	})
	var lastErr error
	for i := 0; i < e.Etcd.Servers(); i++ {
		resp, err := httpClient.Post("http://"+e.Etcd.ServerAddr(i)+"/v3/kv/range", "application/json", bytes.NewReader(body))
		if err != nil {
			lastErr = err
			continue
		}
		var out struct {
			Kvs []struct {
				Key []byte `json:"key"`
			} `json:"kvs"`
		}
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			lastErr = fmt.Errorf("etcd range %s: %d %v", prefix, resp.StatusCode, err)
			continue
		}
		var keys []string
		for _, kv := range out.Kvs {
			keys = append(keys, string(kv.Key))
		}
		return keys, nil
	}
	return nil, lastErr
}

// consulSessions lists the IDs of the sessions named name.
func (e *Env) consulSessions(name string) ([]string, error) {
	var lastErr error
	for i := 0; i < e.ConsulCl.Servers(); i++ {
		resp, err := httpClient.Get("http://" + e.ConsulCl.ServerAddr(i) + "/v1/session/list")
		if err != nil {
			lastErr = err
			continue
		}
		var out []struct{ ID, Name string }
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			lastErr = fmt.Errorf("consul session list: %d %v", resp.StatusCode, err)
			continue
		}
		var ids []string
		for _, s := range out {
			if s.Name == name {
				ids = append(ids, s.ID)
			}
		}
		return ids, nil
	}
	return nil, lastErr
}

// zkCandidates lists the candidate znodes under dir, through a session of
// its own.
func (e *Env) zkCandidates(dir string) ([]string, error) {
	var addrs []string
	for i := 0; i < e.ZooKeeper.Servers(); i++ {
		addrs = append(addrs, e.ZooKeeper.ServerAddr(i))
	}
	c, _, err := zk.Connect(addrs, 4*time.Second, zk.WithLogInfo(false), zk.WithLogger(quietZK{}))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	type result struct {
		names []string
		err   error
	}
	ch := make(chan result, 1)
	go func() {
		names, _, err := c.Children(dir)
		ch <- result{names, err}
	}()
	select {
	case r := <-ch:
		if r.err == zk.ErrNoNode {
			return nil, nil
		}
		var out []string
		for _, n := range r.names {
			if strings.HasPrefix(n, "@") {
				out = append(out, n)
			}
		}
		return out, r.err
	case <-time.After(5 * time.Second):
		return nil, fmt.Errorf("zookeeper: list %s: no answer within 5s", dir)
	}
}

type quietZK struct{}

func (quietZK) Printf(string, ...any) {}
