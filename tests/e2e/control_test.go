//go:build linux

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testcluster"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// queryArgs are a run's backend options without those of the run alone
// (timing, logs), for status, step-down, pause and resume.
func queryArgs(run []string) []string {
	runOnly := map[string]bool{"--ttl": true, "--renew-interval": true, "--kill-grace": true, "--safety-margin": true, "--log-level": true, "--id": true}
	var out []string
	for i := 0; i < len(run); i++ {
		if run[i] == "--" {
			break
		}
		if runOnly[run[i]] {
			i++
			continue
		}
		out = append(out, run[i])
	}
	return out
}

// leaderChild is the one live child of the leaderruns marked mark: its
// candidate's id and epoch ("" when none runs; the watch fails the test
// on two).
func leaderChild(mark string) (id string, epoch uint64) {
	for _, pid := range testsupport.Pids() {
		env := testsupport.Environ(pid)
		if env["HOLDERS_TEST_MARK"] != mark || env["LEADER_SLOT"] == "" {
			continue
		}
		e, _ := strconv.ParseUint(env["LEADER_EPOCH"], 10, 64)
		return env["LEADER_ID"], e
	}
	return "", 0
}

// leaderChildEpoch waits for id's child to run and returns its epoch:
// status names a holder a moment before its child starts.
func leaderChildEpoch(t *testing.T, mark, id string) uint64 {
	t.Helper()
	var e uint64
	waitFor(t, 20*time.Second, id+"'s child", func() bool {
		var got string
		got, e = leaderChild(mark)
		return got == id && e > 0
	})
	return e
}

// controlSuite drives step-down, step-down --to, pause and resume,
// --priority preemption and --health-cmd on one backend, with three
// candidates and then two more, while a /proc watch fails the test on any
// moment with two children alive (the old child is dead before the new
// one starts). args(key) are a run's options with a TTL of ttl.
func controlSuite(t *testing.T, args func(key string) []string, ttl time.Duration) {
	dir := t.TempDir()
	key := newKey("control")
	mark := key + "-" + strconv.Itoa(os.Getpid())
	ledger := filepath.Join(dir, "ledger")
	starts := filepath.Join(dir, "starts")
	script := `echo "$LEADER_SLOT $LEADER_EPOCH" >> ` + ledger + `; echo "$LEADER_ID" >> ` + starts + `; exec sleep 1000`
	started := func() []string {
		b, _ := os.ReadFile(starts)
		return strings.Fields(string(b))
	}
	env := []string{"HOLDERS_TEST_MARK=" + mark}
	q := queryArgs(args(key))
	w := watchSlots(mark, 1)
	var procs []*Proc
	run := func(id string, extra ...string) {
		procs = append(procs, start(t, id, env, withCommand(append(args(key), append([]string{"--id", id}, extra...)...), script)...))
	}
	defer func() {
		for _, p := range procs {
			p.Signal(syscall.SIGTERM)
		}
		for _, p := range procs {
			p.Wait(20 * time.Second)
		}
	}()
	leads := func(what string, ok func(id string) bool) (string, uint64) {
		t.Helper()
		var id string
		var epoch uint64
		testsupport.WaitFor(t, ttl+20*time.Second, what, func() bool {
			id, epoch = leaderChild(mark)
			return id != "" && ok(id)
		})
		return id, epoch
	}
	anyone := func(string) bool { return true }
	for _, id := range []string{"a", "b", "c"} {
		run(id)
	}
	first, e1 := leads("a first leader", anyone)

	// step-down: another candidate leads, with a higher epoch, and no TTL
	// is waited out.
	code, out, errOut, took := runOnce(t, nil, append([]string{"step-down"}, q...)...)
	if code != 0 {
		t.Fatalf("step-down: exit %d\n%s%s", code, out, errOut)
	}
	second, e2 := leads("a new leader after step-down", func(id string) bool { return id != first })
	t.Logf("step-down: %s (epoch %d) -> %s (epoch %d) in %v (TTL %v): %s", first, e1, second, e2, took.Round(time.Millisecond), ttl, strings.TrimSpace(out))
	if e2 <= e1 || !strings.Contains(out, second) {
		t.Errorf("after step-down: %s epoch %d (was %d), command said %q", second, e2, e1, out)
	}
	if took >= ttl {
		t.Errorf("step-down took %v: a TTL (%v) was waited out", took, ttl)
	}

	// step-down --to: only the chosen one leads, twice over.
	for range 2 {
		cur, e := leaderChild(mark)
		to := "a"
		for _, id := range []string{"a", "b", "c"} {
			if id != cur {
				to = id
			}
		}
		// A child writes its start line just after it starts: count from
		// the current leader's.
		waitFor(t, 10*time.Second, "the leader's start line", func() bool { s := started(); return len(s) > 0 && s[len(s)-1] == cur })
		before := len(started())
		code, out, errOut, took = runOnce(t, nil, append([]string{"step-down", "--to", to}, q...)...)
		if code != 0 {
			t.Fatalf("step-down --to %s: exit %d\n%s%s", to, code, out, errOut)
		}
		got, ge := leaderChild(mark)
		for got == "" {
			time.Sleep(20 * time.Millisecond)
			got, ge = leaderChild(mark)
		}
		waitFor(t, 10*time.Second, "the new leader's start line", func() bool { return len(started()) > before })
		t.Logf("step-down --to %s: %s -> %s (epoch %d -> %d) in %v", to, cur, got, e, ge, took.Round(time.Millisecond))
		if got != to || ge <= e {
			t.Errorf("step-down --to %s: %s leads with epoch %d (was %d)", to, got, ge, e)
		}
		if since := started()[before:]; len(since) != 1 || since[0] != to {
			t.Errorf("step-down --to %s: children started since: %v", to, since)
		}
	}

	// pause: no child anywhere, status says so, until resume.
	code, _, errOut, _ = runOnce(t, nil, append([]string{"pause", "--reason", "schema migration"}, q...)...)
	if code != 0 {
		t.Fatalf("pause: exit %d\n%s", code, errOut)
	}
	if id, _ := leaderChild(mark); id != "" {
		t.Errorf("pause returned with %s's child alive", id)
	}
	time.Sleep(ttl)
	if id, _ := leaderChild(mark); id != "" {
		t.Errorf("a child of %s runs while paused", id)
	}
	_, out, _, _ = runOnce(t, nil, append([]string{"status", "--json"}, q...)...)
	var st struct {
		Leader *struct{ ID string }
		Paused *struct{ By, Reason string }
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Paused == nil || st.Paused.Reason != "schema migration" || !strings.Contains(st.Paused.By, "@") || st.Leader != nil {
		t.Errorf("status --json while paused: %v %s", err, out)
	}
	// Nobody leads: a step-down is bad input.
	if code, _, errOut, _ := runOnce(t, nil, append([]string{"step-down"}, q...)...); code != 125 || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
		t.Errorf("step-down with nobody leading: exit %d, %q; want 125 and one line", code, errOut)
	}
	if code, _, errOut, _ := runOnce(t, nil, append([]string{"resume"}, q...)...); code != 0 {
		t.Fatalf("resume: exit %d\n%s", code, errOut)
	}
	resumed, _ := leads("a leader after resume", anyone)

	// --priority: a preferred candidate takes over once ready for
	// --preempt-after; one of the same priority never preempts it.
	preempt := "2s"
	sick := filepath.Join(dir, "p-sick")
	run("p", "--priority", "10", "--preempt-after", preempt,
		"--health-cmd", "test ! -e "+sick, "--health-interval", "200ms", "--health-failures", "2")
	leads("the preferred candidate leading", func(id string) bool { return id == "p" })
	// status names p as soon as it holds the key; its child, whose epoch
	// is compared below, starts a moment later.
	var pe uint64
	waitFor(t, 10*time.Second, "p's child", func() bool {
		id, e := leaderChild(mark)
		pe = e
		return id == "p" && e > 0
	})
	run("q", "--priority", "10", "--preempt-after", "1s")
	time.Sleep(3*time.Second + ttl)
	if id, e := leaderChild(mark); id != "p" || e != pe {
		t.Errorf("an equal priority preempted, or p flapped: %s leads with epoch %d (p had %d)", id, e, pe)
	}
	qp := procs[len(procs)-1]
	qp.Signal(syscall.SIGTERM)
	qp.Wait(20 * time.Second)

	// --health-cmd: a failing check makes the leader step down, and keeps
	// it from campaigning until the check passes again.
	testsupport.WriteFile(t, sick, "", 0o644)
	other, _ := leads("another leader once p's check fails", func(id string) bool { return id != "p" })
	time.Sleep(2 * time.Second)
	if id, _ := leaderChild(mark); id == "p" {
		t.Errorf("p leads again while its health check fails")
	}
	os.Remove(sick)
	leads("p preempting again once healthy", func(id string) bool { return id == "p" })
	t.Logf("first %s, then after resume %s, health step-down to %s, back to p", first, resumed, other)

	// Bad input: one line and 125.
	bad := [][]string{
		append([]string{"step-down", "--timeout", "soon"}, q...),
		append([]string{"pause"}, q...),
		append([]string{"step-down"}, queryArgs(args(newKey("never")))...),
	}
	for _, a := range bad {
		code, _, errOut, _ := runOnce(t, nil, a...)
		if code != 125 || strings.Count(strings.TrimSpace(errOut), "\n") != 0 || errOut == "" {
			t.Errorf("leaderrun %v: exit %d, %q; want 125 and one line", a[:2], code, errOut)
		}
	}
	w.end(t)
	checkSlotLedger(t, ledger)
}

func TestControlLocal(t *testing.T) {
	t.Parallel()
	lockDir := t.TempDir()
	controlSuite(t, func(key string) []string { return localArgs(lockDir, key) }, 4*time.Second)
}

func TestControlEtcd(t *testing.T) {
	t.Parallel()
	c := testcluster.StartEtcd(t, 1)
	eps := c.Endpoints()
	controlSuite(t, func(key string) []string { return etcdArgs(eps, key) }, etcdTTL)
}

func TestControlConsul(t *testing.T) {
	t.Parallel()
	c := testcluster.StartConsul(t, testcluster.ConsulOptions{Servers: 1})
	addr := c.HTTPAddr(0)
	controlSuite(t, func(key string) []string { return consulArgs(addr, key) }, 10*time.Second)
}

func TestControlZooKeeper(t *testing.T) {
	t.Parallel()
	z := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 1})
	servers := z.Addrs()
	controlSuite(t, func(key string) []string { return zkArgs(servers, key) }, 3*time.Second)
}

func TestControlPostgres(t *testing.T) {
	t.Parallel()
	pg := testcluster.StartPostgres(t)
	dsn := pg.DSN()
	controlSuite(t, func(key string) []string { return pgArgs(dsn, key) }, 3*time.Second)
}

// TestControlDynamoDB sets the fake credentials of dynalite for every
// leaderrun it starts: not parallel.
func TestControlDynamoDB(t *testing.T) {
	d := testcluster.StartDynalite(t)
	d.SetEnv(t)
	ep := d.Endpoint()
	controlSuite(t, func(key string) []string { return dynArgs(ep, key) }, 3*time.Second)
}

func TestControlKubernetes(t *testing.T) {
	t.Parallel()
	e := testcluster.StartEtcd(t, 1)
	k := testcluster.StartKube(t, e)
	admin := k.Kubeconfig(t, k.Token(testcluster.KubeAdmin), "")
	controlSuite(t, func(key string) []string { return kubeArgs(admin, key) }, 3*time.Second)
}
