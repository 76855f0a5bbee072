//go:build linux

package chaos

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// Cluster is a real 3-server (or 1-server) backend under test, with the
// faults the suite injects into it.
type Cluster interface {
	// Name is "etcd", "consul", "zookeeper", "kubernetes" or "local".
	Name() string
	// Servers is the number of servers.
	Servers() int
	// ServerAddr is server i's client address, host:port.
	ServerAddr(i int) string
	// Protocol is what clients speak to the servers.
	Protocol() Protocol
	// Kill SIGKILLs server i; Restart starts it again with its data.
	Kill(i int)
	Restart(i int)
	// WaitHealthy waits until every running server serves requests.
	WaitHealthy(t testing.TB)
	// Timing is the leaderrun timing the suite uses on this backend.
	Timing() Timing
	// LeaderrunArgs are leaderrun's backend flags for a host whose proxies
	// listen on addrs (one per server it may talk to).
	LeaderrunArgs(addrs []string) []string
	// HostServers lists the servers host number h talks to.
	HostServers(h int) []int
}

// Timing is a leaderrun lease timeline.
type Timing struct {
	TTL, RenewInterval, KillGrace, SafetyMargin time.Duration
	// LockDelay is Consul's session lock-delay; zero elsewhere.
	LockDelay time.Duration
}

// Args renders the timing as leaderrun flags.
func (tm Timing) Args() []string {
	return []string{"--ttl", tm.TTL.String(), "--renew-interval", tm.RenewInterval.String(),
		"--kill-grace", tm.KillGrace.String(), "--safety-margin", tm.SafetyMargin.String()}
}

// KillPoint is how long after a renewal's send the child is dead at the
// latest: TTL minus the safety margin.
func (tm Timing) KillPoint() time.Duration { return tm.TTL - tm.SafetyMargin }

// EtcdTiming is the suite's timeline on etcd: a 3s lease (the test
// clusters' minimum is 1s, see testcluster.EtcdMinLeaseTTL), renewed every
// second; the child gets SIGTERM 1.5s and SIGKILL 0.5s before the lease
// could expire.
var EtcdTiming = Timing{TTL: 3 * time.Second, RenewInterval: time.Second, KillGrace: time.Second, SafetyMargin: 500 * time.Millisecond}

// ConsulTiming is the suite's timeline on Consul: its minimum session TTL
// of 10s, renewed every 10s/3 as by default, a 2s kill grace, a 1s margin
// and leaderrun's default lock-delay (the TTL).
var ConsulTiming = Timing{TTL: 10 * time.Second, RenewInterval: 10 * time.Second / 3, KillGrace: 2 * time.Second, SafetyMargin: time.Second, LockDelay: 10 * time.Second}

// Etcd adapts a testcluster etcd cluster.
type Etcd struct{ *testcluster.Etcd }

// StartEtcd starts an etcd cluster of n members.
func StartEtcd(t testing.TB, n int) Etcd { return Etcd{testcluster.StartEtcd(t, n)} }

// Name implements Cluster.
func (Etcd) Name() string { return "etcd" }

// Servers implements Cluster.
func (e Etcd) Servers() int { return len(e.Endpoints()) }

// ServerAddr implements Cluster.
func (e Etcd) ServerAddr(i int) string { return strings.TrimPrefix(e.Member(i), "http://") }

// Protocol implements Cluster: etcd's clients speak gRPC.
func (Etcd) Protocol() Protocol { return HTTP2 }

// Timing implements Cluster.
func (Etcd) Timing() Timing { return EtcdTiming }

// LeaderrunArgs implements Cluster.
func (Etcd) LeaderrunArgs(addrs []string) []string {
	urls := make([]string, len(addrs))
	for i, a := range addrs {
		urls[i] = "http://" + a
	}
	return []string{"--backend", "etcd", "--etcd-endpoints", strings.Join(urls, ",")}
}

// HostServers implements Cluster: an etcd client knows every member and
// fails over between them.
func (e Etcd) HostServers(int) []int {
	out := make([]int, e.Servers())
	for i := range out {
		out[i] = i
	}
	return out
}

// Consul adapts a testcluster Consul cluster.
type Consul struct{ *testcluster.Consul }

// StartConsul starts n Consul servers.
func StartConsul(t testing.TB, n int) Consul {
	return Consul{testcluster.StartConsul(t, testcluster.ConsulOptions{Servers: n})}
}

// Name implements Cluster.
func (Consul) Name() string { return "consul" }

// Servers implements Cluster.
func (c Consul) Servers() int { return len(c.Addrs()) }

// ServerAddr implements Cluster.
func (c Consul) ServerAddr(i int) string { return c.HTTPAddr(i) }

// Protocol implements Cluster: Consul's HTTP API.
func (Consul) Protocol() Protocol { return HTTP1 }

// Timing implements Cluster.
func (Consul) Timing() Timing { return ConsulTiming }

// WaitHealthy implements Cluster.
func (c Consul) WaitHealthy(t testing.TB) { c.WaitLeader(t) }

// LeaderrunArgs implements Cluster.
func (c Consul) LeaderrunArgs(addrs []string) []string {
	return []string{"--backend", "consul", "--consul-addr", strings.Join(addrs, ","),
		"--consul-lock-delay", ConsulTiming.LockDelay.String()}
}

// HostServers implements Cluster: each host lists every server, as an
// agentless host does, starting with server h (mod the number of servers)
// so that the hosts' traffic starts out spread over the servers.
func (c Consul) HostServers(h int) []int {
	n := c.Servers()
	out := make([]int, n)
	for i := range out {
		out[i] = (h + i) % n
	}
	return out
}

// KubeTiming is the suite's timeline on Kubernetes: etcd's. A standby
// takes a silent holder over after TTL + 250ms of seeing no change.
var KubeTiming = EtcdTiming

// Kube adapts one kube-apiserver on a one-member etcd: Kubernetes clients
// talk to one server address (a load balancer's, in a real cluster), so
// it is the one server hosts reach; its etcd is not faulted.
type Kube struct {
	*testcluster.Kube
	t testing.TB
}

// StartKube starts an etcd member and a kube-apiserver on it.
func StartKube(t testing.TB) Kube {
	return Kube{testcluster.StartKube(t, testcluster.StartEtcd(t, 1)), t}
}

// Name implements Cluster.
func (Kube) Name() string { return "kubernetes" }

// Servers implements Cluster.
func (Kube) Servers() int { return 1 }

// ServerAddr implements Cluster.
func (k Kube) ServerAddr(int) string { return strings.TrimPrefix(k.URL(), "https://") }

// Protocol implements Cluster: TLS, so the proxies count the records the
// clients send.
func (Kube) Protocol() Protocol { return TLSRecords }

// Kill implements Cluster.
func (k Kube) Kill(int) { k.Kube.Kill() }

// Restart implements Cluster.
func (k Kube) Restart(int) { k.Kube.Restart() }

// WaitHealthy implements Cluster.
func (k Kube) WaitHealthy(t testing.TB) { k.WaitReady(t) }

// Timing implements Cluster.
func (Kube) Timing() Timing { return KubeTiming }

// LeaderrunArgs implements Cluster: a kubeconfig that reaches the server
// through the host's proxy.
func (k Kube) LeaderrunArgs(addrs []string) []string {
	cfg := k.KubeconfigAt(k.t, addrs[0], k.Token(testcluster.KubeAdmin), "default")
	return []string{"--backend", "kubernetes", "--kubeconfig", cfg}
}

// HostServers implements Cluster.
func (Kube) HostServers(int) []int { return []int{0} }

// Link is one host's connection to the backend: a proxy per server the host
// talks to. Cutting it partitions the host.
type Link struct {
	Proxies []*Proxy
}

// NewLink starts proxies for host h of cluster c.
func NewLink(c Cluster, h int) (*Link, error) {
	l := &Link{}
	for _, i := range c.HostServers(h) {
		p, err := NewProxy(c.ServerAddr(i), c.Protocol())
		if err != nil {
			l.Close()
			return nil, err
		}
		l.Proxies = append(l.Proxies, p)
	}
	return l, nil
}

// Addrs are the proxies' addresses, in server order.
func (l *Link) Addrs() []string {
	out := make([]string, len(l.Proxies))
	for i, p := range l.Proxies {
		out[i] = p.Addr()
	}
	return out
}

// Cut partitions the host from every server.
func (l *Link) Cut(mode CutMode) {
	for _, p := range l.Proxies {
		p.Cut(mode)
	}
}

// Heal ends the partition.
func (l *Link) Heal() {
	for _, p := range l.Proxies {
		p.Heal()
	}
}

// Requests is the number of requests the host sent so far.
func (l *Link) Requests() int64 {
	var n int64
	for _, p := range l.Proxies {
		n += p.Requests()
	}
	return n
}

// Close stops the proxies.
func (l *Link) Close() error {
	var errs []error
	for _, p := range l.Proxies {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}

// String names the proxies and their servers, for logs.
func (l *Link) String() string {
	var parts []string
	for _, p := range l.Proxies {
		parts = append(parts, fmt.Sprintf("%s->%s", p.Addr(), p.Target()))
	}
	return strings.Join(parts, ",")
}

// ZooKeeperTiming is the suite's timeline on ZooKeeper: a 3s session (15
// ticks of the test ensembles' 200ms, inside ZooKeeper's 2..20-tick
// limits), renewed every second, with etcd's kill grace and margin.
var ZooKeeperTiming = Timing{TTL: 3 * time.Second, RenewInterval: time.Second, KillGrace: time.Second, SafetyMargin: 500 * time.Millisecond}

// ZooKeeper adapts a testcluster ZooKeeper ensemble.
type ZooKeeper struct{ *testcluster.ZooKeeper }

// StartZooKeeper starts an ensemble of n servers.
func StartZooKeeper(t testing.TB, n int) ZooKeeper {
	return ZooKeeper{testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: n})}
}

// Name implements Cluster.
func (ZooKeeper) Name() string { return "zookeeper" }

// Servers implements Cluster.
func (z ZooKeeper) Servers() int { return len(z.Addrs()) }

// ServerAddr implements Cluster.
func (z ZooKeeper) ServerAddr(i int) string { return z.Addr(i) }

// Protocol implements Cluster: ZooKeeper's length-prefixed frames.
func (ZooKeeper) Protocol() Protocol { return Framed }

// Timing implements Cluster.
func (ZooKeeper) Timing() Timing { return ZooKeeperTiming }

// WaitHealthy implements Cluster.
func (z ZooKeeper) WaitHealthy(t testing.TB) { z.WaitServing(t) }

// LeaderrunArgs implements Cluster.
func (ZooKeeper) LeaderrunArgs(addrs []string) []string {
	return []string{"--backend", "zookeeper", "--zk-servers", strings.Join(addrs, ",")}
}

// HostServers implements Cluster: a ZooKeeper client knows every server
// and moves its session between them.
func (z ZooKeeper) HostServers(int) []int {
	out := make([]int, z.Servers())
	for i := range out {
		out[i] = i
	}
	return out
}

// PostgresTiming is the suite's timeline on PostgreSQL: etcd's. A
// standby takes a silent holder over after TTL + 250ms of seeing no change
// in the lease row, on its own clock.
var PostgresTiming = EtcdTiming

// Postgres adapts one PostgreSQL server: a single primary is the setup the
// backend supports (with synchronous replication whose failover loses no
// committed transaction the clients still reach one primary), so it is
// the one server every host reaches, each through its own proxy.
type Postgres struct {
	*testcluster.Postgres
	t testing.TB
}

// StartPostgres starts a PostgreSQL server of the test's own.
func StartPostgres(t testing.TB) Postgres { return Postgres{testcluster.StartPostgres(t), t} }

// Name implements Cluster.
func (Postgres) Name() string { return "postgres" }

// Servers implements Cluster.
func (Postgres) Servers() int { return 1 }

// ServerAddr implements Cluster.
func (p Postgres) ServerAddr(int) string { return p.Addr() }

// Protocol implements Cluster: the hosts connect without TLS, so the
// proxies count their round trips.
func (Postgres) Protocol() Protocol { return PgWire }

// Kill implements Cluster: the postmaster and every backend process.
func (p Postgres) Kill(int) { p.Postgres.Kill() }

// Restart implements Cluster: the server again, on its port, with its data.
func (p Postgres) Restart(int) { p.Postgres.Restart(p.t) }

// WaitHealthy implements Cluster: Restart returns once the server takes
// connections.
func (Postgres) WaitHealthy(testing.TB) {}

// Timing implements Cluster.
func (Postgres) Timing() Timing { return PostgresTiming }

// LeaderrunArgs implements Cluster: a DSN naming the host's proxy.
func (Postgres) LeaderrunArgs(addrs []string) []string {
	dsn := "postgres://postgres@" + addrs[0] + "/postgres?sslmode=disable"
	return []string{"--backend", "postgres", "--pg-dsn", dsn}
}

// HostServers implements Cluster.
func (Postgres) HostServers(int) []int { return []int{0} }
