package e2e

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// zkTTL and the timeline the ZooKeeper tests use: kill point = last renewal
// send + 2.5s. The test ensembles tick every 200ms, so 3s is 15 ticks,
// inside ZooKeeper's default session limits (2 to 20 ticks).
const zkTTL = 3 * time.Second

func zkArgs(servers []string, key string, extra ...string) []string {
	args := []string{"--backend", "zookeeper", "--zk-servers", strings.Join(servers, ","), "--key", key,
		"--ttl", "3s", "--renew-interval", "500ms", "--kill-grace", "1s", "--safety-margin", "500ms"}
	return append(args, extra...)
}

func zkConn(t *testing.T, servers []string) *zk.Conn {
	t.Helper()
	c, _, err := zk.Connect(servers, 4*time.Second, zk.WithLogInfo(false), zk.WithLogger(quietZK{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

type quietZK struct{}

func (quietZK) Printf(string, ...any) {}

// zkDeleteTree deletes p and everything below it.
func zkDeleteTree(c *zk.Conn, p string) error {
	// A child made while the tree goes (a leader's history record) makes
	// the delete fail with ErrNotEmpty: go round again, as an operator would.
	for range 5 {
		if err := zkDeleteTreeOnce(c, p); err != zk.ErrNotEmpty {
			return err
		}
	}
	return zkDeleteTreeOnce(c, p)
}

func zkDeleteTreeOnce(c *zk.Conn, p string) error {
	children, _, err := c.Children(p)
	if err == zk.ErrNoNode {
		return nil
	}
	if err != nil {
		return err
	}
	for _, ch := range children {
		if err := zkDeleteTreeOnce(c, p+"/"+ch); err != nil {
			return err
		}
	}
	if err := c.Delete(p, -1); err != nil && err != zk.ErrNoNode {
		return err
	}
	return nil
}

func TestZooKeeper(t *testing.T) {
	z := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 1})
	servers := z.Addrs()

	t.Run("kill -9 fails over fast", func(t *testing.T) {
		t.Parallel()
		failoverAfterKill9Guarded(t, zkArgs(servers, newKey("kill9")), time.Second, true)
	})
	t.Run("graceful handoff", func(t *testing.T) {
		t.Parallel()
		gracefulHandoff(t, zkArgs(servers, newKey("handoff")))
	})
	t.Run("frozen leader", func(t *testing.T) {
		t.Parallel()
		frozenLeader(t, zkArgs(servers, newKey("frozen")), zkTTL+5*time.Second)
	})
	t.Run("key deleted by hand", func(t *testing.T) {
		t.Parallel()
		key := newKey("deleted")
		c := zkConn(t, servers)
		keyDeletedByHand(t, zkArgs(servers, key), func() {
			if err := zkDeleteTree(c, "/leaderrun/"+key); err != nil {
				t.Error(err)
			}
		}, zkTTL)
	})
	t.Run("unreachable servers: an outage, not a conflict", func(t *testing.T) {
		t.Parallel()
		unreachableIsAnOutage(t, zkArgs([]string{"127.0.0.1:1"}, newKey("unreach"), "--acquire-timeout", "2s"))
	})
	t.Run("TTL above the ensemble's session limit is refused", func(t *testing.T) {
		t.Parallel()
		p := start(t, "long ttl", nil, append(zkArgs(servers, newKey("longttl"), "--acquire-timeout", "10s"),
			"--ttl", "30s", "--renew-interval", "5s", "--", "true")...)
		if code := p.Wait(20 * time.Second); code != 125 {
			t.Fatalf("exit %d, want 125\n%s", code, p.Output())
		}
		if !strings.Contains(p.Output(), "4s") {
			t.Fatalf("the refusal does not name the ensemble's limit (4s):\n%s", p.Output())
		}
	})
	t.Run("chroot from the connect string, and check from the child", func(t *testing.T) {
		t.Parallel()
		key := newKey("chroot")
		dir := t.TempDir()
		// The child asks `leaderrun check` with no flags: the key, epoch,
		// backend and servers (with the chroot) come from its environment.
		script := binary + " check > " + dir + "/check.out 2>&1; echo $? > " + dir + "/check.code"
		args := zkArgs([]string{strings.Join(servers, ",") + "/apps/prod"}, key)
		p := start(t, "chroot", nil, append(args, "--", "sh", "-c", script)...)
		if code := p.Wait(20 * time.Second); code != 0 {
			t.Fatalf("exit %d\n%s", code, p.Output())
		}
		if b, _ := os.ReadFile(dir + "/check.code"); strings.TrimSpace(string(b)) != "0" {
			out, _ := os.ReadFile(dir + "/check.out")
			t.Fatalf("leaderrun check inside the child: exit %s\n%s", b, out)
		}
		if ok, _, err := zkConn(t, servers).Exists("/apps/prod/leaderrun/" + key); err != nil || !ok {
			t.Fatalf("no /apps/prod/leaderrun/%s (%v): the chroot was not used", key, err)
		}
	})
	t.Run("status and check", func(t *testing.T) {
		t.Parallel()
		key := newKey("status")
		dir := t.TempDir()
		a := startHost(t, dir, "a", "none", zkArgs(servers, key))
		a.waitStarted(t, 30*time.Second)
		st := start(t, "status", nil, "status", "--backend", "zookeeper", "--zk-servers", strings.Join(servers, ","), "--key", key, "--json")
		if code := st.Wait(15 * time.Second); code != 0 {
			t.Fatalf("status exit %d\n%s", code, st.Output())
		}
		ok := start(t, "check", nil, "check", "--backend", "zookeeper", "--zk-servers", strings.Join(servers, ","), "--key", key,
			"--epoch", strconvItoa(int64(a.epoch(t))))
		if code := ok.Wait(15 * time.Second); code != 0 {
			t.Fatalf("check of the current epoch: exit %d\n%s", code, ok.Output())
		}
		stale := start(t, "check stale", nil, "check", "--backend", "zookeeper", "--zk-servers", strings.Join(servers, ","), "--key", key,
			"--epoch", strconvItoa(int64(a.epoch(t))-1))
		if code := stale.Wait(15 * time.Second); code != 1 {
			t.Fatalf("check of an older epoch: exit %d, want 1\n%s", code, stale.Output())
		}
		a.p.Signal(syscall.SIGTERM)
		a.p.Wait(10 * time.Second)
	})
}

func TestZooKeeperAuth(t *testing.T) {
	z := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 1})
	servers := z.Addrs()
	key := newKey("auth")
	dir := t.TempDir()
	ok := start(t, "right password", nil, append(zkArgs(servers, key, "--zk-auth", "alice:right-password"),
		"--", "sh", "-c", "env > "+dir+"/env")...)
	if code := ok.Wait(20 * time.Second); code != 0 {
		t.Fatalf("exit %d with the right password\n%s", code, ok.Output())
	}
	env, _ := os.ReadFile(dir + "/env")
	if strings.Contains(string(env), "right-password") {
		t.Error("a password given by flag reached the child's environment")
	}
	// The key's znode is now alice's only.
	p := start(t, "wrong password", nil, append(zkArgs(servers, key,
		"--zk-auth", "alice:wrong-secret", "--acquire-timeout", "10s"), "--", "true")...)
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
}

func TestZooKeeperEnsemble(t *testing.T) {
	// Sessions of up to 20s, so that an election on a loaded machine
	// cannot outlast the leader test's TTL.
	z := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 3, MaxSessionTimeout: 20 * time.Second})
	servers := z.Addrs()

	// The ensemble's leader dies: the session moves on to the new leader
	// and the child keeps running, unrestarted. A TTL of the sessions'
	// 20s: a CI machine running the other tests beside it once took more
	// than 10s to elect the next leader.
	dir := t.TempDir()
	a := startHost(t, dir, "a", "b", zkArgs(servers, newKey("zkleader"), "--ttl", "20s", "--renew-interval", "1s"))
	pid := a.waitStarted(t, 30*time.Second)
	leader := z.Leader(t)
	z.Kill(leader)
	deadline := time.Now().Add(3 * zkTTL)
	for time.Now().Before(deadline) {
		if !alive(pid) || a.p.Exited() {
			t.Fatalf("child or leaderrun died after the ensemble's leader was killed\n%s", a.p.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := strings.Count(a.p.Output(), "child started"); n != 1 {
		t.Fatalf("child started %d times", n)
	}
	z.Restart(leader)
	z.WaitServing(t)
	a.p.Signal(syscall.SIGTERM)
	a.p.Wait(10 * time.Second)

	// Quorum lost: the child is dead before the last renewal's send + TTL,
	// and leaderrun exits 123.
	dir = t.TempDir()
	exit := startHost(t, dir, "exit", "none", zkArgs(servers, newKey("zkquorum"), "--log-level", "debug"))
	exitPid := exit.waitStarted(t, 30*time.Second)
	waitFor(t, 10*time.Second, "a renewal", func() bool { return strings.Contains(exit.p.Output(), "renewed") })
	leader = z.Leader(t)
	z.Kill(leader)
	z.Kill((leader + 1) % 3)
	if code := exit.p.Wait(3*zkTTL + 5*time.Second); code != 123 {
		t.Fatalf("exit %d after quorum loss, want 123\n%s", code, exit.p.Output())
	}
	if alive(exitPid) {
		t.Fatal("child alive after leaderrun exited")
	}
	lastRenewal := lastLogTime(t, exit.p.Output(), "renewed")
	died := exit.stamp(t, "end")
	if limit := lastRenewal.Add(zkTTL); !died.Before(limit) {
		t.Fatalf("child died at %v, after last renewal + ttl (%v)", died, limit)
	}
	t.Logf("quorum lost: child died %v before the last renewal + ttl", lastRenewal.Add(zkTTL).Sub(died).Round(time.Millisecond))
}

// TestZooKeeperSafetyMarginWarning: with ZooKeeper's usual tickTime of 2s,
// leaderrun warns at start that the default --safety-margin (1s) is not
// above tickTime/2 (DESIGN §1.2), and says nothing with 1.5s.
func TestZooKeeperSafetyMarginWarning(t *testing.T) {
	z := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Tick: 2 * time.Second})
	for _, tc := range []struct {
		margin []string
		warn   bool
	}{
		{nil, true},
		{[]string{"--safety-margin", "1.5s"}, false},
	} {
		args := append([]string{"--backend", "zookeeper", "--zk-servers", strings.Join(z.Addrs(), ","), "--key", newKey("margin"),
			"--ttl", "6s", "--kill-grace", "1s"}, tc.margin...)
		p := start(t, "margin", nil, append(args, "--", "true")...)
		if code := p.Wait(30 * time.Second); code != 0 {
			t.Fatalf("%v: exit %d\n%s", tc.margin, code, p.Output())
		}
		if warned := strings.Contains(p.Output(), "--safety-margin is not above half of ZooKeeper's tickTime"); warned != tc.warn {
			t.Fatalf("%v: warned %v, want %v\n%s", tc.margin, warned, tc.warn, p.Output())
		}
	}
}
