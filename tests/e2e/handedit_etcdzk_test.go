package e2e

import (
	"context"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// stubbornScript is hostScript with a job that ignores the stop signal
// (and so do its children, which inherit the ignored signal): it lives
// through the whole kill grace and dies only of the SIGKILL at its end.
func stubbornScript(dir, name, other string) string {
	f := func(suffix string) string { return filepath.Join(dir, name+"."+suffix) }
	o := filepath.Join(dir, other+".pid")
	return strings.Join([]string{
		"date +%s%N > " + f("start"),
		"if [ -f " + o + " ]; then p=$(cat " + o + "); " +
			"if [ -e /proc/$p/stat ] && ! grep -q ') [ZX]' /proc/$p/stat; then echo $p > " + f("overlap") + "; fi; fi",
		"echo $LEADER_EPOCH > " + f("epoch"),
		"trap '' TERM",
		"echo $$ > " + f("pid"),
		"sleep 1000 & wait",
	}, "\n")
}

// stubbornHost starts leaderrun as host name with args (and extra after
// them) and the stubborn job of stubbornScript.
func stubbornHost(t *testing.T, dir, name, other string, args []string, extra ...string) *host {
	t.Helper()
	a := append(append(append([]string{"--id", name}, args...), extra...), "--", "sh", "-c", stubbornScript(dir, name, other))
	return &host{name: name, dir: dir, p: start(t, name, nil, a...)}
}

// handEditedHolder: a leads with a stubborn job, b waits; edit changes
// a's record by hand. Whatever it did, b's job must never start while a's
// lives (DESIGN §1.14): a's record gone is a holder gone silent, not a
// free key. a stops its job at once or at its kill point, and b leads
// after that, within the TTL and a margin, with a higher epoch.
func handEditedHolder(t *testing.T, args []string, ttl time.Duration, edit func()) {
	t.Helper()
	dir := t.TempDir()
	start := func(name, other string, extra ...string) *host {
		return stubbornHost(t, dir, name, other, args, extra...)
	}
	a := start("a", "b")
	aPid := a.waitStarted(t, 30*time.Second)
	// b's debug log says when its campaign watches a: from then on it
	// has seen a live holder (before, it has not, and may lead at once).
	b := start("b", "a", "--log-level", "debug")
	waitFor(t, 10*time.Second, "b to watch a", func() bool { return strings.Contains(b.p.Output(), "waiting for predecessor") })
	edit()
	edited := time.Now()
	b.waitStarted(t, 3*ttl+20*time.Second)
	t.Logf("record edited by hand -> standby's child started: %v", b.stamp(t, "start").Sub(edited).Round(time.Millisecond))
	b.noOverlap(t)
	if alive(aPid) {
		t.Fatalf("a's child (pid %d) alive after b's child started", aPid)
	}
	if ea, eb := a.epoch(t), b.epoch(t); eb <= ea {
		t.Errorf("epoch after the hand edit %d, want > %d", eb, ea)
	}
	if code := a.p.Wait(ttl + 20*time.Second); code != 123 {
		t.Errorf("a exit %d after its record was edited, want 123\n%s", code, a.p.Output())
	}
}

// threeCandidates: a leads with a stubborn job, w watches a, c watches w,
// and edit deletes the whole key by hand. c never watched a, and must not
// take w's vanishing (w never led) for a's: neither w's nor c's job may
// start while a's lives.
func threeCandidates(t *testing.T, args []string, ttl time.Duration, edit func()) {
	t.Helper()
	dir := t.TempDir()
	start := func(name string, extra ...string) *host {
		a := append(append(append([]string{"--id", name}, args...), extra...), "--", "sh", "-c", stubbornScript(dir, name, "a"))
		return &host{name: name, dir: dir, p: start(t, name, nil, a...)}
	}
	a := start("a")
	aPid := a.waitStarted(t, 30*time.Second)
	w := start("w", "--log-level", "debug")
	waitFor(t, 10*time.Second, "w to watch a", func() bool { return strings.Contains(w.p.Output(), "waiting for predecessor") })
	c := start("c", "--log-level", "debug")
	waitFor(t, 10*time.Second, "c to watch w", func() bool { return strings.Contains(c.p.Output(), "waiting for predecessor") })
	// Long enough that w's own TTL, counted from when c first saw w, is
	// over: only what c knows of a can hold c back.
	time.Sleep(ttl + time.Second)
	edit()
	waitFor(t, 3*ttl+30*time.Second, "w's or c's child to start", func() bool { return w.started() || c.started() })
	w.noOverlap(t)
	c.noOverlap(t)
	if alive(aPid) {
		t.Fatalf("a's child (pid %d) alive after another child started", aPid)
	}
}

func TestHandEditEtcd(t *testing.T) {
	c := testcluster.StartEtcd(t, 1)
	eps := c.Endpoints()
	cli := etcdClient(t, eps)
	ctx := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		t.Cleanup(cancel)
		return ctx
	}
	// holderKey is the election key of key's holder: the first created.
	holderKey := func(t *testing.T, key string) *clientv3.GetResponse {
		resp, err := cli.Get(ctx(), "/leaderrun/"+key+"/@", clientv3.WithFirstCreate()...)
		if err != nil || len(resp.Kvs) == 0 {
			t.Fatalf("no election key for %s: %v", key, err)
		}
		return resp
	}
	t.Run("election key deleted", func(t *testing.T) {
		t.Parallel()
		key := newKey("hand-del")
		handEditedHolder(t, etcdArgs(eps, key), etcdTTL, func() {
			k := string(holderKey(t, key).Kvs[0].Key)
			if _, err := cli.Delete(ctx(), k); err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("whole prefix deleted", func(t *testing.T) {
		t.Parallel()
		key := newKey("hand-prefix")
		handEditedHolder(t, etcdArgs(eps, key), etcdTTL, func() {
			if _, err := cli.Delete(ctx(), "/leaderrun/"+key+"/", clientv3.WithPrefix()); err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("whole prefix deleted, three candidates", func(t *testing.T) {
		t.Parallel()
		key := newKey("hand-three")
		threeCandidates(t, etcdArgs(eps, key), etcdTTL, func() {
			if _, err := cli.Delete(ctx(), "/leaderrun/"+key+"/", clientv3.WithPrefix()); err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("value written over without the lease", func(t *testing.T) {
		t.Parallel()
		key := newKey("hand-put")
		handEditedHolder(t, etcdArgs(eps, key), etcdTTL, func() {
			k := string(holderKey(t, key).Kvs[0].Key)
			if _, err := cli.Put(ctx(), k, "edited"); err != nil {
				t.Fatal(err)
			}
		})
	})
}

func TestHandEditZooKeeper(t *testing.T) {
	// Sessions of up to 20s for "value edited"; the others ask for 3s.
	z := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 1, MaxSessionTimeout: 20 * time.Second})
	servers := z.Addrs()
	c := zkConn(t, servers)
	// holderNode is the znode of key's holder: the lowest sequence.
	holderNodeOn := func(t *testing.T, c *zk.Conn, key string) string {
		dir := "/leaderrun/" + key
		names, _, err := c.Children(dir)
		if err != nil {
			t.Fatal(err)
		}
		var cands []string
		for _, n := range names {
			if strings.HasPrefix(n, "@") {
				cands = append(cands, n)
			}
		}
		if len(cands) == 0 {
			t.Fatalf("no candidate under %s", dir)
		}
		sort.Slice(cands, func(i, j int) bool { return cands[i][len(cands[i])-10:] < cands[j][len(cands[j])-10:] })
		return dir + "/" + cands[0]
	}
	holderNode := func(t *testing.T, key string) string { return holderNodeOn(t, c, key) }
	t.Run("znode deleted", func(t *testing.T) {
		t.Parallel()
		key := newKey("hand-del")
		handEditedHolder(t, zkArgs(servers, key), zkTTL, func() {
			if err := c.Delete(holderNode(t, key), -1); err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("whole key deleted", func(t *testing.T) {
		t.Parallel()
		key := newKey("hand-tree")
		handEditedHolder(t, zkArgs(servers, key), zkTTL, func() {
			if err := zkDeleteTree(c, "/leaderrun/"+key); err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("whole key deleted, three candidates", func(t *testing.T) {
		t.Parallel()
		key := newKey("hand-three")
		threeCandidates(t, zkArgs(servers, key), zkTTL, func() {
			if err := zkDeleteTree(c, "/leaderrun/"+key); err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("crashed holder without a guard", func(t *testing.T) {
		t.Parallel()
		// Nothing releases: the session expires, its znode goes without
		// a release, and b waits out a's TTL counted from a's last
		// renewal it saw, which the expiry follows closely.
		// The job is one process, which PR_SET_PDEATHSIG kills with a.
		dir, args := t.TempDir(), zkArgs(servers, newKey("crash"), "--no-guard")
		start := func(name, other string) *host {
			script := strings.Replace(stubbornScript(dir, name, other), "sleep 1000 & wait", "exec sleep 1000", 1)
			return &host{name: name, dir: dir, p: start(t, name, nil, append(append([]string{"--id", name}, args...), "--", "sh", "-c", script)...)}
		}
		a := start("a", "b")
		a.waitStarted(t, 30*time.Second)
		b := start("b", "a")
		waitFor(t, 10*time.Second, "b to campaign", func() bool { return strings.Contains(b.p.Output(), "waiting for the holder") })
		a.p.Signal(syscall.SIGKILL)
		killed := time.Now()
		b.waitStarted(t, 3*zkTTL+20*time.Second)
		t.Logf("kill -9 without a guard -> standby's child started: %v", b.stamp(t, "start").Sub(killed).Round(time.Millisecond))
		b.noOverlap(t)
		if ea, eb := a.epoch(t), b.epoch(t); eb <= ea {
			t.Errorf("epoch after the crash %d, want > %d", eb, ea)
		}
	})
	t.Run("the guard names the znode it releases, with --zk-auth", func(t *testing.T) {
		t.Parallel()
		// The znodes are alice's only: the guard authenticates as
		// leaderrun did before it writes the release record.
		key := newKey("guard-auth")
		alice := zkConn(t, servers)
		if err := alice.AddAuth("digest", []byte("alice:secret")); err != nil {
			t.Fatal(err)
		}
		a, b := pair(t, zkArgs(servers, key, "--zk-auth", "alice:secret"))
		node := holderNodeOn(t, alice, key)
		a.p.Signal(syscall.SIGKILL)
		b.waitStarted(t, 3*zkTTL+20*time.Second)
		b.noOverlap(t)
		data, _, err := alice.Get("/leaderrun/" + key + "/~released")
		if err != nil || "/leaderrun/"+key+"/"+string(data) != node {
			t.Fatalf("release record %q (%v), want the name of %s", data, err, node)
		}
	})
	t.Run("value edited", func(t *testing.T) {
		t.Parallel()
		key := newKey("hand-set")
		// An edited value changes nothing: a keeps leading, b waits, and
		// a's release hands over as usual. An 8s TTL, watched for two:
		// with 3s, a loaded CI machine's ZooKeeper once answered none of
		// a's renewals in time, and a stopped for that.
		const ttl = 8 * time.Second
		dir := t.TempDir()
		args := zkArgs(servers, key, "--ttl", ttl.String())
		a := startHost(t, dir, "a", "b", args)
		a.waitStarted(t, 30*time.Second)
		b := startHost(t, dir, "b", "a", args)
		waitFor(t, 10*time.Second, "b to campaign", func() bool { return strings.Contains(b.p.Output(), "waiting for the holder") })
		if _, err := c.Set(holderNode(t, key), []byte("edited"), -1); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * ttl)
		if b.started() || a.p.Exited() {
			t.Fatalf("an edited value moved the lead (a exited %v, b started %v)", a.p.Exited(), b.started())
		}
		a.p.Signal(syscall.SIGTERM)
		b.waitStarted(t, 20*time.Second)
		b.noOverlap(t)
	})
}

// A ZooKeeper holder's znode value rewritten by hand to declare a TTL of
// 100ms, then a candidate that starts after the edit (or a standby
// restarted after it: a new process knows nothing of what the old one
// saw), then the znode deleted. The candidate counts with the TTL it
// first read, 100ms, and leads about 100ms + A after the holder's last
// write it saw, while a's stubborn job lives on through its kill grace.
// The holder keeps leading after the value edit (a value edit "changes
// nothing"), and its renewals, which write its true TTL, never raise
// the one counted with.
func TestHandEditZooKeeperLowTTLLateCandidate(t *testing.T) {
	z := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 1})
	servers := z.Addrs()
	c := zkConn(t, servers)
	key := newKey("hand-lowttl")
	dir := t.TempDir()
	start := func(name, other string, extra ...string) *host {
		return stubbornHost(t, dir, name, other, zkArgs(servers, key), extra...)
	}
	a := start("a", "b")
	aPid := a.waitStarted(t, 30*time.Second)
	names, _, err := c.Children("/leaderrun/" + key)
	if err != nil {
		t.Fatal(err)
	}
	node := ""
	for _, n := range names {
		if strings.HasPrefix(n, "@") {
			node = "/leaderrun/" + key + "/" + n
		}
	}
	if node == "" {
		t.Fatalf("no znode of a under /leaderrun/%s: %v", key, names)
	}
	if _, err := c.Set(node, []byte(`{"ttl_ms":100}`), -1); err != nil {
		t.Fatal(err)
	}
	b := start("b", "a", "--log-level", "debug")
	waitFor(t, 10*time.Second, "b to watch a", func() bool { return strings.Contains(b.p.Output(), "waiting for predecessor") })
	time.Sleep(time.Second) // a renews (writes its record) meanwhile
	if err := c.Delete(node, -1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*zkTTL+20*time.Second, "b's child to start", b.started)
	b.noOverlap(t)
	if alive(aPid) {
		t.Fatalf("a's child (pid %d) alive after b's child started", aPid)
	}
}

// The holder's etcd election key deleted by hand, then a candidate that
// starts after the delete (or a standby restarted after it). It finds no
// key ahead of its own and leads at once, though the holder's lease
// lives and its stubborn job runs on through its kill grace: only a
// standby that watched the deleted key waits for that lease to end.
func TestHandEditEtcdLateCandidate(t *testing.T) {
	c := testcluster.StartEtcd(t, 1)
	eps := c.Endpoints()
	cli := etcdClient(t, eps)
	key := newKey("hand-late")
	dir := t.TempDir()
	start := func(name, other string, extra ...string) *host {
		return stubbornHost(t, dir, name, other, etcdArgs(eps, key), extra...)
	}
	a := start("a", "b")
	aPid := a.waitStarted(t, 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Delete(ctx, "/leaderrun/"+key+"/@", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	b := start("b", "a")
	waitFor(t, 3*etcdTTL+20*time.Second, "b's child to start", b.started)
	b.noOverlap(t)
	if alive(aPid) {
		t.Fatalf("a's child (pid %d) alive after b's child started", aPid)
	}
}

// The holder's znode deleted by hand, then a candidate that starts after
// the delete (or a standby restarted after it): nothing is ahead of its
// own znode and ~released does not name the deleted one, yet it leads at
// once while the holder's stubborn job runs on through its kill grace.
func TestHandEditZooKeeperLateCandidate(t *testing.T) {
	z := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 1})
	servers := z.Addrs()
	c := zkConn(t, servers)
	key := newKey("hand-zklate")
	dir := t.TempDir()
	start := func(name, other string) *host { return stubbornHost(t, dir, name, other, zkArgs(servers, key)) }
	a := start("a", "b")
	aPid := a.waitStarted(t, 30*time.Second)
	names, _, err := c.Children("/leaderrun/" + key)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if strings.HasPrefix(n, "@") {
			if err := c.Delete("/leaderrun/"+key+"/"+n, -1); err != nil {
				t.Fatal(err)
			}
		}
	}
	b := start("b", "a")
	waitFor(t, 3*zkTTL+20*time.Second, "b's child to start", b.started)
	b.noOverlap(t)
	if alive(aPid) {
		t.Fatalf("a's child (pid %d) alive after b's child started", aPid)
	}
}
