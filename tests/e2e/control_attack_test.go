//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/signals"
	"github.com/leaderrun/leaderrun/tests/testcluster"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// processesWithArg lists the live processes whose command line has arg
// as one of its words.
func processesWithArg(arg string) []int {
	var out []int
	for _, pid := range testsupport.Pids() {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if err != nil {
			continue
		}
		for _, w := range strings.Split(string(b), "\x00") {
			if w == arg && signals.ProcessAlive(pid) {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// checkTag is a number unique to this test process from base on, for a
// health check to carry (sleep TAG) so that processesWithArg finds what
// is left of it.
func checkTag(base int) string { return strconv.Itoa(base + os.Getpid()%100000) }

// leftovers gives the processes carrying tag a moment to go, then kills
// and returns those still alive.
func leftovers(tag string) []int {
	time.Sleep(200 * time.Millisecond)
	left := processesWithArg(tag)
	for _, pid := range left {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return left
}

// noLeftovers fails the test, saying what, if processes carrying tag
// are still alive (leftovers), and kills them.
func noLeftovers(t *testing.T, tag, what string) {
	t.Helper()
	if left := leftovers(tag); len(left) > 0 {
		t.Errorf("%s: %v", what, left)
	}
}

// sleeper is the job of most candidates here: it runs until killed.
const sleeper = "exec sleep 1000"

// candidate starts leaderrun --id id with run (a run's backend options)
// and extra options, running job.
func candidate(t *testing.T, env, run []string, id, job string, extra ...string) *Proc {
	t.Helper()
	return start(t, id, env, withCommand(slices.Concat(run, []string{"--id", id}, extra), job)...)
}

// candidates starts one candidate per id with run and extra options,
// each running job.
func candidates(t *testing.T, env, run []string, job string, extra []string, ids ...string) []*Proc {
	t.Helper()
	var procs []*Proc
	for _, id := range ids {
		procs = append(procs, candidate(t, env, run, id, job, extra...))
	}
	return procs
}

// holderIDs are the ids h0 ... h(n-1).
func holderIDs(n int) []string {
	var ids []string
	for i := range n {
		ids = append(ids, "h"+strconv.Itoa(i))
	}
	return ids
}

// control runs a control command (status, step-down, pause, resume)
// with q, the key's backend options (queryArgs).
func control(t *testing.T, q []string, cmd ...string) (code int, out, errOut string, took time.Duration) {
	t.Helper()
	return runOnce(t, nil, slices.Concat(cmd, q)...)
}

// mustControl runs a control command and stops the test unless it
// exits 0.
func mustControl(t *testing.T, q []string, cmd ...string) {
	t.Helper()
	if code, out, errOut, _ := control(t, q, cmd...); code != 0 {
		t.Fatalf("%s: exit %d %s %s", strings.Join(cmd, " "), code, out, errOut)
	}
}

// controlResult is how a control command run in the background ended.
type controlResult struct {
	code        int
	out, errOut string
}

// controlAsync runs a control command in the background: its result
// comes on the channel once it exits.
func controlAsync(t *testing.T, q []string, cmd ...string) <-chan controlResult {
	t.Helper()
	res := make(chan controlResult, 1)
	go func() {
		code, out, errOut, _ := control(t, q, cmd...)
		res <- controlResult{code, out, errOut}
	}()
	return res
}

// slotHolders maps each slot with a live child of the leaderruns marked
// mark to its candidate's id.
func slotHolders(mark string) map[int]string {
	m := map[int]string{}
	for _, k := range slotChildren(mark) {
		m[k.slot] = k.id
	}
	return m
}

// waitLeader waits until want's child runs, or any candidate's when want
// is "", among the leaderruns marked mark.
func waitLeader(t *testing.T, within time.Duration, what, mark, want string) {
	t.Helper()
	waitFor(t, within, what, func() bool {
		id, _ := leaderChild(mark)
		if want == "" {
			return id != ""
		}
		return id == want
	})
}

// stopWant143 sends SIGTERM to every leaderrun, then fails the test
// unless each exits 143 (waiting at most wait for each).
func stopWant143(t *testing.T, wait time.Duration, procs ...*Proc) {
	t.Helper()
	for _, p := range procs {
		p.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		if code := p.Wait(wait); code != 128+15 {
			t.Errorf("%s: exit %d on SIGTERM, want 143", p.name, code)
		}
	}
}

// termPromptly sends SIGTERM to each leaderrun in turn and fails the
// test unless it exits 143 within limit (waiting at most wait for it).
func termPromptly(t *testing.T, wait, limit time.Duration, procs ...*Proc) {
	t.Helper()
	for _, p := range procs {
		began := time.Now()
		p.Signal(syscall.SIGTERM)
		if code := p.Wait(wait); code != 128+15 || time.Since(began) > limit {
			t.Errorf("%s: exit %d %v after SIGTERM, want 143 within %v", p.name, code, time.Since(began), limit)
		}
	}
}

// TestControlAttackHealthLeavesNothing: a health check that puts a
// process in the background and exits 0 (a daemon that closed its output)
// leaves nothing behind, neither while leaderrun runs nor after it exits.
func TestControlAttackHealthLeavesNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key := newKey("hc-leftover")
	tag := checkTag(700000)
	hc := "sleep " + tag + " >/dev/null 2>&1 </dev/null & exit 0"
	p := start(t, "a", nil, withCommand(append(localArgs(dir, key), "--health-cmd", hc, "--health-interval", "200ms"), sleeper)...)
	waitFor(t, 10*time.Second, "the child", func() bool { return strings.Contains(p.Output(), "child started") })
	time.Sleep(1500 * time.Millisecond)
	during := len(processesWithArg(tag))
	t.Logf("%d background processes of the checks alive while leading", during)
	stopAll(p)
	left := leftovers(tag)
	if during > 1 || len(left) > 0 {
		t.Errorf("health checks' background processes: %d alive while leading, %d left after leaderrun exited (%v)", during, len(left), left)
	}
}

// TestControlAttackTermWhileHeldBack: SIGTERM to a candidate held back by
// a pause, or by a failing health check, ends it promptly with 128+15,
// and nothing of its checks is left.
func TestControlAttackTermWhileHeldBack(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key := newKey("held-term")
	q := queryArgs(localArgs(dir, key))
	// The local backend's pause needs the lock directory made.
	if err := os.MkdirAll(filepath.Join(dir, "leaderrun"), 0o755); err != nil {
		t.Fatal(err)
	}
	mustControl(t, q, "pause", "--reason", "attack")
	tag := checkTag(800000)
	paused := start(t, "paused", nil, withCommand(localArgs(dir, key), sleeper)...)
	sick := start(t, "sick", nil, withCommand(localArgs(dir, newKey("held-sick"), "--health-cmd", "sleep "+tag+"; exit 1", "--health-timeout", "30s"), sleeper)...)
	waitFor(t, 10*time.Second, "held back", func() bool {
		return strings.Contains(paused.Output(), "not campaigning") && len(processesWithArg(tag)) > 0
	})
	termPromptly(t, 5*time.Second, 2*time.Second, paused, sick)
	noLeftovers(t, tag, "the health check outlived leaderrun")
}

// TestControlAttackGarbageRecord: a hand-edited control record that is
// not one: the leader keeps leading, a waiting candidate does not take
// over, and each command says so in one line with 125.
func TestControlAttackGarbageRecord(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key, mark, env := markedKey("garbage")
	a := candidate(t, env, localArgs(dir, key), "a", sleeper)
	e := leaderChildEpoch(t, mark, "a")
	b := candidate(t, env, localArgs(dir, key), "b", sleeper)
	time.Sleep(500 * time.Millisecond)
	testsupport.WriteFile(t, filepath.Join(dir, "leaderrun", key+"~control"), "{not json", 0o644)
	q := queryArgs(localArgs(dir, key))
	for _, cmd := range [][]string{{"step-down"}, {"pause", "--reason", "x"}, {"resume"}} {
		code, _, errOut, _ := control(t, q, cmd...)
		if code != 125 || strings.Count(strings.TrimSpace(errOut), "\n") != 0 || !strings.Contains(errOut, "control record") {
			t.Errorf("%s on a garbage record: exit %d, %q; want 125 and one line naming the record", cmd[0], code, errOut)
		}
	}
	time.Sleep(5 * time.Second) // more than a TTL
	if id, e2 := leaderChild(mark); id != "a" || e2 != e {
		t.Errorf("with a garbage record %q leads with epoch %d; a had %d", id, e2, e)
	}
	stopAll(a, b)
}

// failingPath is a proxy to a Consul agent that answers 500 to the GETs
// of exactly one path while fail is set.
func failingPath(t *testing.T, target, path string, fail *atomic.Bool) string {
	u, _ := url.Parse("http://" + target)
	rp := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fail.Load() && r.Method == http.MethodGet && r.URL.Path == path {
			http.Error(w, "injected fault", http.StatusInternalServerError)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// TestControlAttackPauseCannotReadHolder: pause must not say "nobody
// leads" (exit 0) when it could not read who leads. The leader here is
// frozen (it cannot act on the pause) and the pause's reads of the
// holder fail: pause exits 0 only if no child runs.
func TestControlAttackPauseCannotReadHolder(t *testing.T) {
	t.Parallel()
	c := testcluster.StartConsul(t, testcluster.ConsulOptions{Servers: 1})
	key, mark, env := markedKey("pause-unread")
	a := candidate(t, env, consulArgs(c.HTTPAddr(0), key), "a", sleeper)
	waitLeader(t, 20*time.Second, "a leading", mark, "a")
	var fail atomic.Bool
	proxy := failingPath(t, c.HTTPAddr(0), "/v1/kv/leaderrun/"+key, &fail)
	a.Signal(syscall.SIGSTOP)
	defer a.Signal(syscall.SIGCONT)
	fail.Store(true)
	code, _, errOut, took := control(t, queryArgs(consulArgs(proxy, key)), "pause", "--reason", "attack", "--timeout", "3s")
	id, _ := leaderChild(mark)
	t.Logf("pause: exit %d in %v: %s", code, took.Round(time.Millisecond), strings.TrimSpace(errOut))
	if code == 0 && id != "" {
		t.Errorf("pause exited 0 while %s's child runs (it could not read the holder)", id)
	}
	if code == 0 || strings.Count(strings.TrimSpace(errOut), "\n") > 1 {
		t.Errorf("pause: exit %d, %q; want non-zero, saying it could not read the holder", code, errOut)
	}
	a.Signal(syscall.SIGCONT)
	stopAll(a)
}

// TestControlAttackWinWithoutRecord: a candidate that cannot read the
// control record (its reads of it fail; it still campaigns) must not
// start its child while the key is paused: the read after a win is what
// makes "no child starts while paused" hold, and a failed read is not an
// empty record.
func TestControlAttackWinWithoutRecord(t *testing.T) {
	t.Parallel()
	c := testcluster.StartConsul(t, testcluster.ConsulOptions{Servers: 1})
	key, mark, env := markedKey("win-unread")
	direct := consulArgs(c.HTTPAddr(0), key)
	a := candidate(t, env, direct, "a", sleeper)
	waitLeader(t, 20*time.Second, "a leading", mark, "a")
	var fail atomic.Bool
	fail.Store(true)
	proxy := failingPath(t, c.HTTPAddr(0), "/v1/kv/leaderrun/"+key+"/~control", &fail)
	b := candidate(t, env, consulArgs(proxy, key), "b", sleeper)
	waitFor(t, 20*time.Second, "b waiting", func() bool { return strings.Contains(b.Output(), "waiting for the holder") })
	mustControl(t, queryArgs(direct), "pause", "--reason", "attack")
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if id, _ := leaderChild(mark); id != "" {
			t.Fatalf("%s's child started while the key is paused", id)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Once it reads the record again it still holds back; after resume
	// someone leads.
	fail.Store(false)
	time.Sleep(2 * time.Second)
	if id, _ := leaderChild(mark); id != "" {
		t.Fatalf("%s's child started while the key is paused", id)
	}
	mustControl(t, queryArgs(direct), "resume")
	waitLeader(t, 20*time.Second, "a leader after resume", mark, "")
	stopAll(a, b)
}

// TestControlAttackStepDownToAbsent: step-down --to a candidate that is
// not running: nobody leads before the request's until, the command says
// who did not come (exit 1), and then the others (the old leader among
// them) campaign again.
func TestControlAttackStepDownToAbsent(t *testing.T) {
	t.Parallel()
	eps := testcluster.StartEtcd(t, 1).Endpoints()
	key, mark, env := markedKey("to-absent")
	w := watchSlots(mark, 1)
	procs := candidates(t, env, etcdArgs(eps, key), sleeper, nil, "a", "b")
	waitLeader(t, 20*time.Second, "a leader", mark, "")
	first, e1 := leaderChild(mark)
	began := time.Now()
	res := controlAsync(t, queryArgs(etcdArgs(eps, key)), "step-down", "--to", "nobody", "--timeout", "4s")
	for time.Since(began) < 3500*time.Millisecond {
		if id, e := leaderChild(mark); id != "" && e != e1 {
			t.Errorf("%s leads (epoch %d) %v into a step-down reserved for another", id, e, time.Since(began))
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r := <-res; r.code != 1 || !strings.Contains(r.errOut, "nobody") {
		t.Errorf("step-down --to nobody: exit %d, %q; want 1 naming the candidate", r.code, r.errOut)
	}
	waitLeader(t, 10*time.Second, "a leader after the reservation", mark, "")
	id, e2 := leaderChild(mark)
	t.Logf("%s (epoch %d) stepped down; after the reservation %s leads (epoch %d), %v after the request", first, e1, id, e2, time.Since(began).Round(time.Millisecond))
	stopAll(procs...)
	w.end(t)
}

// TestControlAttackKillDuringHandover: the leader is killed -9 while it
// hands over to --to b: its guard kills the job and releases; b (and no
// one else) leads, after the old child is dead.
func TestControlAttackKillDuringHandover(t *testing.T) {
	t.Parallel()
	eps := testcluster.StartEtcd(t, 1).Endpoints()
	key, mark, env := markedKey("kill-handover")
	w := watchSlots(mark, 1)
	// The job ignores SIGTERM: the handover takes the whole kill grace.
	script := `trap "" TERM; exec sleep 1000`
	a := candidate(t, env, etcdArgs(eps, key), "a", script)
	waitLeader(t, 20*time.Second, "a leading", mark, "a")
	others := candidates(t, env, etcdArgs(eps, key), script, nil, "b", "c")
	time.Sleep(time.Second)
	res := controlAsync(t, queryArgs(etcdArgs(eps, key)), "step-down", "--to", "b", "--timeout", "15s")
	waitFor(t, 5*time.Second, "a stopping", func() bool { return strings.Contains(a.Output(), "stopping child") })
	a.Signal(syscall.SIGKILL)
	if r := <-res; r.code != 0 || !strings.Contains(r.out, "b leads") {
		t.Errorf("step-down --to b with a killed: exit %d; %q %q", r.code, r.out, r.errOut)
	}
	waitLeader(t, 5*time.Second, "b's child", mark, "b")
	stopAll(append(others, a)...)
	w.end(t)
}

// TestControlAttackHoldersPause: a key run with --holders 3. step-down
// --slot 1 moves that slot only; pause (even without --holders: the
// holders say how many slots there are) returns only once no slot runs a
// child; resume fills all three again.
func TestControlAttackHoldersPause(t *testing.T) {
	t.Parallel()
	eps := testcluster.StartEtcd(t, 1).Endpoints()
	key, mark, env := markedKey("holders-pause")
	w := watchSlots(mark, 3)
	procs := candidates(t, env, etcdArgs(eps, key), sleeper, []string{"--holders", "3"}, holderIDs(4)...)
	waitChildren(t, mark, 3)
	q := queryArgs(etcdArgs(eps, key))
	before := slotHolders(mark)
	if code, out, errOut, _ := control(t, q, "step-down", "--slot", "1"); code != 0 {
		t.Errorf("step-down --slot 1: exit %d %s %s", code, out, errOut)
	}
	waitFor(t, 10*time.Second, "slot 1 refilled", func() bool { m := slotHolders(mark); return len(m) == 3 && m[1] != before[1] })
	after := slotHolders(mark)
	if after[0] != before[0] || after[2] != before[2] {
		t.Errorf("step-down --slot 1 moved other slots: %v -> %v", before, after)
	}
	// The holder of slot 2 cannot act on the pause (frozen): pause must
	// wait for it, not return once slot 0 is free.
	var frozen *Proc
	for _, p := range procs {
		if p.name == after[2] {
			frozen = p
		}
	}
	frozen.Signal(syscall.SIGSTOP)
	code, _, errOut, took := control(t, q, "pause", "--reason", "attack", "--timeout", "1s")
	left := slotChildren(mark)
	t.Logf("pause without --holders, slot 2 frozen: exit %d in %v, %d children left: %s", code, took.Round(time.Millisecond), len(left), strings.TrimSpace(errOut))
	if code == 0 && len(left) != 0 {
		t.Errorf("pause: exit 0 with children alive: %v", left)
	}
	frozen.Signal(syscall.SIGCONT)
	code, _, errOut, _ = control(t, q, "pause", "--reason", "attack")
	if left := slotChildren(mark); code != 0 || len(left) != 0 {
		t.Errorf("pause: exit %d (%s) with children alive: %v", code, strings.TrimSpace(errOut), left)
	}
	time.Sleep(3 * time.Second)
	if left := slotChildren(mark); len(left) != 0 {
		t.Errorf("children run while paused: %v", left)
	}
	mustControl(t, q, "resume")
	waitChildren(t, mark, 3) // every slot filled again after resume
	stopAll(procs...)
	w.end(t)
}

// TestControlAttackStepDownFrozen: step-down of a frozen leader (SIGSTOP:
// it cannot act): the deadline rules, its guard kills the job, and only
// then does another candidate lead; woken, the old leader starts nothing.
func TestControlAttackStepDownFrozen(t *testing.T) {
	t.Parallel()
	eps := testcluster.StartEtcd(t, 1).Endpoints()
	key, mark, env := markedKey("sd-frozen")
	w := watchSlots(mark, 1)
	a := candidate(t, env, etcdArgs(eps, key), "a", sleeper, "--on-lost", "rejoin")
	waitLeader(t, 20*time.Second, "a leading", mark, "a")
	b := candidate(t, env, etcdArgs(eps, key), "b", sleeper)
	time.Sleep(time.Second)
	a.Signal(syscall.SIGSTOP)
	code, out, errOut, took := control(t, queryArgs(etcdArgs(eps, key)), "step-down", "--to", "b", "--timeout", "15s")
	t.Logf("step-down --to b of a frozen leader: exit %d in %v: %s", code, took.Round(time.Millisecond), strings.TrimSpace(out))
	if code != 0 {
		t.Errorf("step-down of a frozen leader: exit %d: %s %s", code, out, errOut)
	}
	waitLeader(t, 5*time.Second, "b's child", mark, "b")
	a.Signal(syscall.SIGCONT)
	time.Sleep(3 * time.Second)
	if id, _ := leaderChild(mark); id != "b" {
		t.Errorf("after the old leader woke, %q leads", id)
	}
	stopAll(a, b)
	w.end(t)
}

// TestControlAttackStepDownPauseRace: step-down, pause and resume fired
// at once, over and over, on three candidates: never two children, never
// a child while paused after pause returned, and someone leads at the end.
func TestControlAttackStepDownPauseRace(t *testing.T) {
	t.Parallel()
	eps := testcluster.StartEtcd(t, 1).Endpoints()
	key, mark, env := markedKey("sd-pause")
	w := watchSlots(mark, 1)
	procs := candidates(t, env, etcdArgs(eps, key), sleeper, nil, "a", "b", "c")
	q := queryArgs(etcdArgs(eps, key))
	waitLeader(t, 20*time.Second, "a leader", mark, "")
	for i := range 4 {
		to := []string{"step-down", "--timeout", "5s"}
		if i%2 == 1 {
			to = append(to, "--to", []string{"a", "b", "c"}[i%3])
		}
		done := controlAsync(t, q, to...)
		time.Sleep(time.Duration(i*30) * time.Millisecond)
		code, _, errOut, _ := control(t, q, "pause", "--reason", "race")
		if code != 0 {
			t.Errorf("pause %d: exit %d %s", i, code, errOut)
		}
		for range 50 {
			if id, _ := leaderChild(mark); id != "" {
				t.Errorf("round %d: %s's child runs after pause returned", i, id)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if code, _, errOut, _ := control(t, q, "resume"); code != 0 {
			t.Errorf("resume %d: exit %d %s", i, code, errOut)
		}
		<-done
		waitLeader(t, 20*time.Second, "a leader after resume", mark, "")
	}
	stopAll(procs...)
	w.end(t)
}

// TestControlAttackHealthHostile: checks that flood their output, hang
// ignoring SIGTERM, or fail under --no-wait: each fails in its time and
// nothing of them is left.
func TestControlAttackHealthHostile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tag := checkTag(900000)
	// A flood that never ends, and a hang that ignores SIGTERM: both
	// time out (the check fails) and the candidate never leads.
	for name, hc := range map[string]string{
		"flood": "yes " + tag,
		"hang":  `trap "" TERM; sleep ` + tag,
	} {
		key := newKey("hc-" + name)
		p := start(t, name, nil, withCommand(append(localArgs(dir, key), "--health-cmd", hc, "--health-timeout", "300ms", "--health-interval", "100ms"), sleeper)...)
		waitFor(t, 10*time.Second, name+" failing", func() bool { return strings.Contains(p.Output(), "timed out after") })
		time.Sleep(time.Second)
		if strings.Contains(p.Output(), "child started") {
			t.Errorf("%s: led with a check that times out", name)
		}
		termPromptly(t, 5*time.Second, 2*time.Second, p)
	}
	code, _, errOut, took := runOnce(t, nil, withCommand(append(localArgs(dir, newKey("hc-nowait")), "--no-wait", "--health-cmd", "exit 1"), "echo ran")...)
	t.Logf("--no-wait with a failing check: exit %d in %v", code, took.Round(time.Millisecond))
	if code != 124 || strings.Contains(errOut, "ran") {
		t.Errorf("--no-wait with a failing check: exit %d %q", code, errOut)
	}
	noLeftovers(t, tag, "checks left behind")
}

// TestControlAttackPriorities: two preferred candidates of different
// priorities and a plain holder: the highest ends up leading, once, and
// stays; a preferred one whose own check fails never asks for the key.
func TestControlAttackPriorities(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key, mark, env := markedKey("prio")
	w := watchSlots(mark, 1)
	run := localArgs(dir, key)
	procs := []*Proc{candidate(t, env, run, "plain", sleeper)}
	waitLeader(t, 10*time.Second, "plain leading", mark, "plain")
	procs = append(procs,
		candidate(t, env, run, "sick", sleeper, "--priority", "50", "--preempt-after", "1s", "--health-cmd", "exit 1", "--health-interval", "200ms"),
		candidate(t, env, run, "p10", sleeper, "--priority", "10", "--preempt-after", "1s"),
		candidate(t, env, run, "p20", sleeper, "--priority", "20", "--preempt-after", "1s"))
	waitLeader(t, 20*time.Second, "p20 leading", mark, "p20")
	e := leaderChildEpoch(t, mark, "p20")
	time.Sleep(5 * time.Second)
	if id, e2 := leaderChild(mark); id != "p20" || e2 != e {
		t.Errorf("p20 (epoch %d) did not stay: %s leads with epoch %d", e, id, e2)
	}
	if strings.Contains(procs[1].Output(), "asked the holder to hand over") || strings.Contains(procs[1].Output(), "child started") {
		t.Errorf("the candidate whose check fails asked for the key or led")
	}
	stopAll(procs...)
	w.end(t)
}

// TestControlAttackBadInput: each command's bad input is one line, 125,
// and leaves the key's control record as it was (none here).
func TestControlAttackBadInput(t *testing.T) {
	t.Parallel()
	eps := testcluster.StartEtcd(t, 1).Endpoints()
	key, mark, env := markedKey("bad-input")
	a := candidate(t, env, etcdArgs(eps, key), "a", sleeper)
	waitLeader(t, 20*time.Second, "a leading", mark, "a")
	q := queryArgs(etcdArgs(eps, key))
	// step-down --to the leader itself is no bad input: it exits 0
	// saying so (TestStepDownToCurrentLeader).
	cases := [][]string{
		{"step-down", "--to", ""},
		{"step-down", "--timeout", "-1s"},
		{"step-down", "--timeout", "0s"},
		{"step-down", "--slot", "-1"},
		{"step-down", "--slot", "2"},
		{"step-down", "--bogus"},
		{"pause"},
		{"pause", "--reason", "  "},
		{"pause", "--reason", "x", "--holders", "0"},
		{"pause", "--reason", "x", "--timeout", "0s"},
		{"pause", "--reason", "x", "--timeout", "-1s"},
		{"resume", "--timeout", "soon"},
	}
	cli := etcdClient(t, eps)
	for _, c := range cases {
		code, out, errOut, _ := control(t, q, c...)
		if code != 125 || strings.Count(strings.TrimSpace(errOut), "\n") != 0 || errOut == "" || out != "" {
			t.Errorf("leaderrun %q: exit %d, %q %q; want 125 and one line", c, code, out, errOut)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		r, err := cli.Get(ctx, "/leaderrun/"+key+"/~control")
		cancel()
		if err != nil || len(r.Kvs) != 0 {
			t.Fatalf("after leaderrun %q the control record is %v (%v)", c, r.Kvs, err)
		}
	}
	if id, _ := leaderChild(mark); id != "a" {
		t.Errorf("bad input moved the leader: %q leads", id)
	}
	stopAll(a)
}

// TestControlAttackLeaderCannotReadRecord: a leader whose reads of the
// control record fail keeps its job past a TTL, and a step-down still
// reaches it once they work again.
func TestControlAttackLeaderCannotReadRecord(t *testing.T) {
	t.Parallel()
	c := testcluster.StartConsul(t, testcluster.ConsulOptions{Servers: 1})
	key, mark, env := markedKey("lead-unread")
	var fail atomic.Bool
	proxy := failingPath(t, c.HTTPAddr(0), "/v1/kv/leaderrun/"+key+"/~control", &fail)
	a := candidate(t, env, consulArgs(proxy, key), "a", sleeper)
	waitLeader(t, 20*time.Second, "a leading", mark, "a")
	e := leaderChildEpoch(t, mark, "a")
	fail.Store(true)
	time.Sleep(11 * time.Second) // the TTL is 10s
	if id, e2 := leaderChild(mark); id != "a" || e2 != e {
		t.Errorf("a leader that cannot read the control record lost its job: %q leads with %d", id, e2)
	}
	fail.Store(false)
	q := queryArgs(consulArgs(c.HTTPAddr(0), key))
	b := candidate(t, env, consulArgs(c.HTTPAddr(0), key), "b", sleeper)
	time.Sleep(time.Second)
	code, out, errOut, took := control(t, q, "step-down", "--timeout", "15s")
	t.Logf("step-down once the record reads again: exit %d in %v %s", code, took.Round(time.Millisecond), strings.TrimSpace(out))
	if code != 0 || !strings.Contains(out, "b leads") {
		t.Errorf("step-down once the record reads again: exit %d %q %q", code, out, errOut)
	}
	stopAll(a, b)
}

// TestControlAttackPinnedSlot: --holders 2 and three candidates, paused
// and resumed (every candidate has given a slot back or stepped down from
// one), then the holders killed one after the other: each campaign races
// every slot again, so the spare refills whichever slot was freed.
func TestControlAttackPinnedSlot(t *testing.T) {
	t.Parallel()
	eps := testcluster.StartEtcd(t, 1).Endpoints()
	key, mark, env := markedKey("pinned")
	w := watchSlots(mark, 2)
	procs := map[string]*Proc{}
	for _, p := range candidates(t, env, etcdArgs(eps, key), sleeper, []string{"--holders", "2"}, holderIDs(3)...) {
		procs[p.name] = p
	}
	waitChildren(t, mark, 2)
	q := queryArgs(etcdArgs(eps, key))
	mustControl(t, q, "pause", "--reason", "x", "--holders", "2")
	time.Sleep(2 * time.Second)
	mustControl(t, q, "resume")
	var kids []slotChild
	filled := func() bool { kids = slotChildren(mark); return len(kids) == 2 }
	waitFor(t, 30*time.Second, "2 slots filled after resume", filled)
	for round := range 2 {
		victim := kids[round%2] // as the wait saw them: a second scan may catch a child between exec and its marker
		procs[victim.id].Signal(syscall.SIGKILL)
		delete(procs, victim.id)
		if round == 1 {
			break
		}
		waitFor(t, 20*time.Second, "the spare refilling the slot of the killed holder", filled)
	}
	termPromptly(t, 20*time.Second, 5*time.Second, slices.Collect(maps.Values(procs))...)
	w.end(t)
}

// TestControlAttackSlotStepDownSpare: --holders 2 and three candidates.
// A step-down --slot of one holder, which campaigns for every slot again,
// is answered by the spare: the holder that stepped down does not win its
// own slot back first, and the other slot stays where it was. On etcd
// the spare is queued first on the slot; on the local backend every
// candidate polls the lock, so only the hold keeps the holder out.
func TestControlAttackSlotStepDownSpare(t *testing.T) {
	t.Parallel()
	t.Run("etcd", func(t *testing.T) {
		t.Parallel()
		eps := testcluster.StartEtcd(t, 1).Endpoints()
		slotStepDownSpare(t, func(key string) []string { return etcdArgs(eps, key) })
	})
	t.Run("local", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		slotStepDownSpare(t, func(key string) []string { return localArgs(dir, key) })
	})
}

func slotStepDownSpare(t *testing.T, args func(key string) []string) {
	key, mark, env := markedKey("slot-sd-spare")
	w := watchSlots(mark, 2)
	procs := candidates(t, env, args(key), sleeper, []string{"--holders", "2"}, holderIDs(3)...)
	waitChildren(t, mark, 2)
	q := queryArgs(args(key))
	for round := range 4 {
		slot := round % 2
		before := slotHolders(mark)
		var spare *Proc
		for _, p := range procs {
			if p.name != before[0] && p.name != before[1] {
				spare = p
			}
		}
		// The spare is slow to answer (frozen): the slot stays empty
		// rather than go back to the holder that stepped down.
		spare.Signal(syscall.SIGSTOP)
		res := controlAsync(t, q, "step-down", "--slot", strconv.Itoa(slot), "--timeout", "20s")
		waitFor(t, 10*time.Second, "the holder stepping down", func() bool { return slotHolders(mark)[slot] != before[slot] })
		time.Sleep(1500 * time.Millisecond)
		during := slotHolders(mark)
		spare.Signal(syscall.SIGCONT)
		if r := <-res; r.code != 0 {
			t.Errorf("round %d: step-down --slot %d: exit %d %s %s", round, slot, r.code, strings.TrimSpace(r.out), strings.TrimSpace(r.errOut))
		}
		waitFor(t, 10*time.Second, "the slot refilled", func() bool { m := slotHolders(mark); return len(m) == 2 && m[slot] != before[slot] })
		after := slotHolders(mark)
		t.Logf("round %d: step-down --slot %d: %v -> %v (spare %s frozen) -> %v", round, slot, before, during, spare.name, after)
		if during[slot] != "" || after[slot] != spare.name || after[1-slot] != before[1-slot] {
			t.Errorf("round %d: step-down --slot %d of %s: %v -> %v -> %v; want the slot empty while the spare %s is frozen, then the spare in it and the other slot unchanged", round, slot, before[slot], before, during, after, spare.name)
		}
	}
	stopWant143(t, 20*time.Second, procs...)
	w.end(t)
}

// TestControlAttackStepDownToReportsTo: step-down --to X exits 0 only
// once X leads. A candidate that wins in the meantime (here one-attempt
// runs, started over and over, that read the record only after their
// win) gives the key back at once; the command must not take its brief
// term for the answer.
func TestControlAttackStepDownToReportsTo(t *testing.T) {
	t.Parallel()
	eps := testcluster.StartEtcd(t, 1).Endpoints()
	key, mark, env := markedKey("to-reports")
	w := watchSlots(mark, 1)
	procs := candidates(t, env, etcdArgs(eps, key), sleeper, nil, "a", "b")
	waitLeader(t, 20*time.Second, "a leader", mark, "")
	stop := make(chan struct{})
	spun := make(chan struct{})
	var gaveBack atomic.Int32
	go func() {
		defer close(spun)
		for {
			select {
			case <-stop:
				return
			default:
			}
			// A one-attempt run that finds the key free once the
			// reservation has ended leads, rightly: its job ends in a
			// moment so that a and b, queued ahead of the runs after it,
			// take the key next instead of waiting behind it for good.
			cmd := exec.Command(binary, withCommand(append(etcdArgs(eps, key), "--id", "nw", "--no-wait"), "exec sleep 0.3")...)
			cmd.Env = append(os.Environ(), env...)
			if b, _ := cmd.CombinedOutput(); strings.Contains(string(b), "giving the key back") {
				gaveBack.Add(1)
			}
		}
	}()
	q := queryArgs(etcdArgs(eps, key))
	// To a candidate that never comes: only the one-attempt runs take the
	// key (and give it back) until the request ends.
	code, out, errOut, _ := control(t, q, "step-down", "--to", "ghost", "--timeout", "4s")
	if code != 1 || !strings.Contains(errOut, "ghost") {
		t.Errorf("step-down --to ghost: exit %d, %q %q; want 1 naming ghost", code, out, errOut)
	}
	waitFor(t, 10*time.Second, "a leader after the reservation", func() bool { id, _ := leaderChild(mark); return id == "a" || id == "b" })
	for i := range 4 {
		cur, _ := leaderChild(mark)
		to := "a"
		if cur == "a" {
			to = "b"
		}
		code, out, errOut, _ = control(t, q, "step-down", "--to", to, "--timeout", "10s")
		if code != 0 || !strings.HasPrefix(out, to+" leads") {
			t.Errorf("round %d: step-down --to %s: exit %d, %q %q", i, to, code, out, errOut)
		}
		waitLeader(t, 10*time.Second, to+"'s child", mark, to)
	}
	close(stop)
	<-spun
	t.Logf("one-attempt runs that won and gave the key back: %d", gaveBack.Load())
	stopAll(procs...)
	w.end(t)
}

// TestControlAttackStepDownRestarting: step-downs of leaders whose child
// keeps exiting and restarting (--restart always, --on-lost rejoin): a
// handover never overlaps a restart, and no restart happens after the
// stop began.
func TestControlAttackStepDownRestarting(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key, mark, env := markedKey("sd-restart")
	w := watchSlots(mark, 1)
	procs := candidates(t, env, localArgs(dir, key), "exec sleep 0.3", []string{"--restart", "always", "--restart-delay", "100ms", "--on-lost", "rejoin"}, "a", "b", "c")
	q := queryArgs(localArgs(dir, key))
	waitLeader(t, 10*time.Second, "a leader", mark, "")
	for i := range 6 {
		args := []string{"step-down", "--timeout", "10s"}
		if i%2 == 1 {
			_, st, _, _ := control(t, q, "status", "--json")
			var s struct{ Leader *struct{ ID string } }
			_ = json.Unmarshal([]byte(st), &s)
			for _, id := range []string{"a", "b", "c"} {
				if s.Leader != nil && s.Leader.ID != id {
					args = append(args, "--to", id)
					break
				}
			}
		}
		if code, out, errOut, _ := control(t, q, args...); code != 0 {
			t.Errorf("round %d: %v: exit %d %q %q", i, args, code, out, errOut)
		}
		time.Sleep(300 * time.Millisecond)
	}
	stopAll(procs...)
	w.end(t)
}

// TestControlRepairGarbageRecord: a record that does not parse, but is a
// value the backend versions (an etcd key written by hand), holds every
// candidate back; `resume` replaces it, and the key runs again.
func TestControlRepairGarbageRecord(t *testing.T) {
	t.Parallel()
	eps := testcluster.StartEtcd(t, 1).Endpoints()
	key, mark, env := markedKey("repair")
	cli := etcdClient(t, eps)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "/leaderrun/"+key+"/~control", "{not json"); err != nil {
		t.Fatal(err)
	}
	a := candidate(t, env, etcdArgs(eps, key), "a", sleeper)
	time.Sleep(2 * time.Second)
	if id, _ := leaderChild(mark); id != "" {
		t.Errorf("%s runs a child while the control record cannot be read", id)
	}
	code, _, errOut, _ := control(t, queryArgs(etcdArgs(eps, key)), "resume")
	if code != 0 || !strings.Contains(errOut, "does not parse") {
		t.Errorf("resume over a garbage record: exit %d, %q; want 0 and a line saying it was replaced", code, errOut)
	}
	waitLeader(t, 20*time.Second, "a leading once the record is repaired", mark, "a")
	stopAll(a)
}

// TestControlAttackSlotHealthHoldsNothing: --holders 2. A holder whose
// health check fails steps down and, while its check fails, holds no slot
// at all, not even one that is free: it races the slots again only once
// a check passed.
func TestControlAttackSlotHealthHoldsNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key, mark, env := markedKey("slot-health")
	ok := filepath.Join(dir, "healthy")
	testsupport.WriteFile(t, ok, "", 0o644)
	a := candidate(t, env, localArgs(dir, key), "a", sleeper, "--holders", "2", "--health-cmd", "test -e "+ok, "--health-interval", "200ms", "--health-failures", "1")
	b := candidate(t, env, localArgs(dir, key), "b", sleeper, "--holders", "2")
	waitChildren(t, mark, 2)
	holders := func() map[int]string {
		out, err := exec.Command(binary, "status", "--backend", "local", "--lock-dir", dir, "--holders", "2", "--json", key).Output()
		if err != nil {
			t.Fatalf("status: %v %s", err, out)
		}
		var r struct {
			Slots []struct {
				Slot   int `json:"slot"`
				Leader *struct {
					ID string `json:"id"`
				} `json:"leader"`
			} `json:"slots"`
		}
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("status --json: %v %s", err, out)
		}
		m := map[int]string{}
		for _, s := range r.Slots {
			if s.Leader != nil {
				m[s.Slot] = s.Leader.ID
			}
		}
		return m
	}
	if err := os.Remove(ok); err != nil {
		t.Fatal(err)
	}
	waitChildren(t, mark, 1) // a stepping down
	stopWant143(t, 10*time.Second, b)
	for range 10 {
		time.Sleep(300 * time.Millisecond)
		if m := holders(); len(m) != 0 {
			t.Fatalf("with its health check failing, a holds slots %v", m)
		}
	}
	testsupport.WriteFile(t, ok, "", 0o644)
	waitChildren(t, mark, 1) // a leading again once healthy
	stopWant143(t, 10*time.Second, a)
}
