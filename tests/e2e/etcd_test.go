package e2e

import (
	"context"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leaderrun/leaderrun/tests/testcluster"
)

var keySeq atomic.Int64

// newKey is a key no other test uses.
func newKey(prefix string) string {
	return prefix + "-" + strconvItoa(keySeq.Add(1)) + "-" + strconvItoa(int64(os.Getpid()))
}

// etcdTTL and the timeline the etcd tests use: kill point = last renewal
// send + 2.5s.
const etcdTTL = 3 * time.Second

func etcdArgs(endpoints []string, key string, extra ...string) []string {
	args := []string{"--backend", "etcd", "--etcd-endpoints", strings.Join(endpoints, ","), "--key", key,
		"--ttl", "3s", "--renew-interval", "500ms", "--kill-grace", "1s", "--safety-margin", "500ms"}
	return append(args, extra...)
}

func etcdClient(t *testing.T, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

func TestEtcd(t *testing.T) {
	c := testcluster.StartEtcd(t, 1)
	eps := c.Endpoints()

	t.Run("kill -9 fails over fast", func(t *testing.T) {
		t.Parallel()
		failoverAfterKill9Guarded(t, etcdArgs(eps, newKey("kill9")), 2*time.Second, true)
	})
	t.Run("graceful handoff", func(t *testing.T) {
		t.Parallel()
		gracefulHandoff(t, etcdArgs(eps, newKey("handoff")))
	})
	t.Run("frozen leader", func(t *testing.T) {
		t.Parallel()
		frozenLeader(t, etcdArgs(eps, newKey("frozen")), etcdTTL+5*time.Second)
	})
	t.Run("key deleted by hand", func(t *testing.T) {
		t.Parallel()
		key := newKey("deleted")
		cli := etcdClient(t, eps)
		keyDeletedByHand(t, etcdArgs(eps, key), func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := cli.Delete(ctx, "/leaderrun/"+key+"/", clientv3.WithPrefix()); err != nil {
				t.Error(err)
			}
		}, etcdTTL)
	})
	t.Run("unreachable endpoints: an outage, not a conflict", func(t *testing.T) {
		t.Parallel()
		unreachableIsAnOutage(t, etcdArgs([]string{"127.0.0.1:1"}, newKey("unreach"), "--acquire-timeout", "2s"))
	})
	t.Run("TLS to a plaintext endpoint is refused", func(t *testing.T) {
		t.Parallel()
		ca := writeSelfSignedCA(t)
		p := start(t, "tls", nil, append(etcdArgs(eps, newKey("tls"), "--etcd-cacert", ca, "--acquire-timeout", "10s"), "--", "true")...)
		if code := p.Wait(20 * time.Second); code != 125 {
			t.Fatalf("exit %d, want 125\n%s", code, p.Output())
		}
	})
}

func TestEtcdAuth(t *testing.T) {
	c := testcluster.StartEtcd(t, 1)
	eps := c.Endpoints()
	cli := etcdClient(t, eps)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, step := range []func() error{
		func() error { _, err := cli.UserAdd(ctx, "root", "right-password"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	p := start(t, "wrong password", nil, append(etcdArgs(eps, newKey("auth"),
		"--etcd-user", "root", "--etcd-password", "wrong-secret", "--acquire-timeout", "10s"), "--", "true")...)
	began := time.Now()
	if code := p.Wait(20 * time.Second); code != 125 {
		t.Fatalf("exit %d, want 125\n%s", code, p.Output())
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("wrong password took %v to be refused; it retried?", took)
	}
	if strings.Contains(p.Output(), "wrong-secret") {
		t.Errorf("the password appears in the output:\n%s", p.Output())
	}
	dir := t.TempDir()
	ok := start(t, "right password", nil, append(etcdArgs(eps, newKey("auth"),
		"--etcd-user", "root", "--etcd-password", "right-password"), "--", "sh", "-c", "env > "+dir+"/env")...)
	if code := ok.Wait(20 * time.Second); code != 0 {
		t.Fatalf("exit %d with the right password\n%s", code, ok.Output())
	}
	env, _ := os.ReadFile(dir + "/env")
	if strings.Contains(string(env), "right-password") {
		t.Error("a password given by flag reached the child's environment")
	}
}

func TestEtcdCluster(t *testing.T) {
	c := testcluster.StartEtcd(t, 3)
	eps := c.Endpoints()

	// A member the leader talks to dies: the client fails over to another
	// endpoint and the child keeps running, unrestarted.
	dir := t.TempDir()
	a := startHost(t, dir, "a", "b", etcdArgs(eps, newKey("member")))
	pid := a.waitStarted(t, 30*time.Second)
	c.Kill(0)
	deadline := time.Now().Add(3 * etcdTTL)
	for time.Now().Before(deadline) {
		if !alive(pid) || a.p.Exited() {
			t.Fatalf("child or leaderrun died after one member was killed\n%s", a.p.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := strings.Count(a.p.Output(), "child started"); n != 1 {
		t.Fatalf("child started %d times", n)
	}
	c.Restart(0)
	c.WaitHealthy(t)
	a.p.Signal(syscall.SIGTERM)
	a.p.Wait(10 * time.Second)

	// Quorum lost: the child is dead before the last renewal's send + TTL,
	// and leaderrun exits 123; with --on-lost rejoin it leads again after
	// quorum returns, with a higher epoch.
	dir = t.TempDir()
	exit := startHost(t, dir, "exit", "none", etcdArgs(eps, newKey("quorum"), "--log-level", "debug"))
	exitPid := exit.waitStarted(t, 30*time.Second)
	dir2 := t.TempDir()
	rejoin := startHost(t, dir2, "rejoin", "none", etcdArgs(eps, newKey("quorum-rejoin"), "--on-lost", "rejoin"))
	rejoin.waitStarted(t, 30*time.Second)
	firstEpoch := rejoin.epoch(t)
	if err := os.Remove(rejoin.file("pid")); err != nil {
		t.Fatal(err)
	}
	c.Stop(1)
	c.Stop(2)
	if code := exit.p.Wait(3*etcdTTL + 5*time.Second); code != 123 {
		t.Fatalf("exit %d after quorum loss, want 123\n%s", code, exit.p.Output())
	}
	if alive(exitPid) {
		t.Fatal("child alive after leaderrun exited")
	}
	lastRenewal := lastLogTime(t, exit.p.Output(), "renewed")
	died := exit.stamp(t, "end")
	if limit := lastRenewal.Add(etcdTTL); !died.Before(limit) {
		t.Fatalf("child died at %v, after last renewal + ttl (%v)", died, limit)
	}
	t.Logf("quorum lost: child died %v before the last renewal + ttl", lastRenewal.Add(etcdTTL).Sub(died).Round(time.Millisecond))

	c.Restart(1)
	c.Restart(2)
	c.WaitHealthy(t)
	rejoin.waitStarted(t, 30*time.Second)
	if e := rejoin.epoch(t); e <= firstEpoch {
		t.Fatalf("epoch after rejoining %d, want > %d", e, firstEpoch)
	}
	rejoin.p.Signal(syscall.SIGTERM)
	rejoin.p.Wait(10 * time.Second)
}

// lastLogTime is the timestamp of the last log line containing what.
func lastLogTime(t *testing.T, out, what string) time.Time {
	t.Helper()
	var last time.Time
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, what) {
			continue
		}
		ts, _, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if at, err := time.Parse("2006-01-02T15:04:05.000Z0700", ts); err == nil {
			last = at
		}
	}
	if last.IsZero() {
		t.Fatalf("no %q line in the log", what)
	}
	return last
}
