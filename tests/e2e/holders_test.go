//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/chaos"
	"github.com/leaderrun/leaderrun/tests/fence"
	"github.com/leaderrun/leaderrun/tests/testcluster"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// slotChild is one child seen alive in /proc: which candidate's, which slot.
type slotChild struct {
	pid, slot int
	id        string
}

// slotChildren lists the live children of the leaderruns marked mark: the
// processes whose environment has both the mark and LEADER_SLOT (leaderrun
// and its guard have the mark only).
func slotChildren(mark string) []slotChild {
	var out []slotChild
	for _, pid := range testsupport.Pids() {
		env := testsupport.Environ(pid)
		if env["HOLDERS_TEST_MARK"] != mark {
			continue
		}
		s, ok := env["LEADER_SLOT"]
		if !ok {
			continue
		}
		slot, _ := strconv.Atoi(s)
		out = append(out, slotChild{pid: pid, slot: slot, id: env["LEADER_ID"]})
	}
	return out
}

// slotWatch scans /proc every few milliseconds and records every moment
// with more than n children alive or two in one slot.
type slotWatch struct {
	mu         sync.Mutex
	violations []string
	most       int
	stop, done chan struct{}
}

func watchSlots(mark string, n int) *slotWatch {
	w := &slotWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			kids := slotChildren(mark)
			bySlot := map[int][]slotChild{}
			for _, k := range kids {
				bySlot[k.slot] = append(bySlot[k.slot], k)
			}
			w.mu.Lock()
			w.most = max(w.most, len(kids))
			if len(kids) > n {
				w.violations = append(w.violations, fmt.Sprintf("%d children alive: %v", len(kids), kids))
			}
			for s, ks := range bySlot {
				if len(ks) > 1 || s < 0 || s >= n {
					w.violations = append(w.violations, fmt.Sprintf("slot %d: %v", s, ks))
				}
			}
			w.mu.Unlock()
		}
	}()
	return w
}

// end stops the watch and fails the test on any violation.
func (w *slotWatch) end(t *testing.T) {
	t.Helper()
	close(w.stop)
	<-w.done
	for i, v := range w.violations {
		if i == 5 {
			t.Errorf("... %d more", len(w.violations)-5)
			break
		}
		t.Error(v)
	}
	t.Logf("at most %d children alive at once", w.most)
}

var (
	writerOnce sync.Once
	writerBin  string
	writerErr  error
)

// fenceWriter builds the fenced resource's writer (tests/fence/writer) once.
func fenceWriter(t *testing.T) string {
	t.Helper()
	writerOnce.Do(func() {
		writerBin = filepath.Join(filepath.Dir(binary), "fence-writer")
		out, err := exec.Command("go", "build", "-o", writerBin, "github.com/leaderrun/leaderrun/tests/fence/writer").CombinedOutput()
		if err != nil {
			writerErr = fmt.Errorf("build the fence writer: %v\n%s", err, out)
		}
	})
	if writerErr != nil {
		t.Fatal(writerErr)
	}
	return writerBin
}

// slotFences are one fenced resource per slot: a child writes, with its
// LEADER_EPOCH, to the fence of its LEADER_SLOT (FENCE_ADDR_<slot>).
type slotFences []*fence.Server

func newSlotFences(t *testing.T, n int) (slotFences, []string) {
	t.Helper()
	fs := make(slotFences, n)
	env := []string{"FENCE_NETWORK=tcp"}
	for i := range fs {
		f, err := fence.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		fs[i] = f
		env = append(env, "FENCE_ADDR_"+strconv.Itoa(i)+"="+f.Addr())
	}
	return fs, env
}

// check judges each slot's record: no two writers of one slot
// interleaved (accepted or not), no accepted epoch went down, no epoch
// was shared, no stale write accepted; it returns the writes accepted.
func (fs slotFences) check(t *testing.T) int {
	t.Helper()
	total := 0
	for s, f := range fs {
		r := fence.NewChecker().Feed(f.Log(0))
		total += r.Accepted
		if len(r.Overlaps) > 0 || len(r.LiveOverlaps) > 0 || r.Regressions > 0 || len(r.SharedEpochs) > 0 || r.StaleAccepted > 0 {
			t.Errorf("slot %d's fence: overlaps %v, live overlaps %v, regressions %d, shared epochs %v, stale accepted %d",
				s, r.Overlaps, r.LiveOverlaps, r.Regressions, r.SharedEpochs, r.StaleAccepted)
		}
	}
	return total
}

// slotLedger: each child appends "slot epoch" to the ledger when it
// starts; the epochs of one slot must strictly increase.
func checkSlotLedger(t *testing.T, ledger string) {
	t.Helper()
	b, _ := os.ReadFile(ledger)
	last := map[string]uint64{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		e, _ := strconv.ParseUint(f[1], 10, 64)
		if e <= last[f[0]] {
			t.Errorf("slot %s: epoch %d after %d", f[0], e, last[f[0]])
		}
		last[f[0]] = e
	}
}

// holdersSuite runs --holders 3 with 5 candidates on one backend: never
// more than 3 children alive nor two in one slot (through /proc), kill -9
// of a holder refills its slot through its guard well before the TTL, a
// frozen holder's child is dead before its slot goes to anyone else, and
// a candidate with another --holders is refused with 125. args(key) are a
// run's options with a TTL of ttl. guardRefills: the guard frees a killed
// holder's slot well before the TTL; frozenRefills: a frozen holder's slot
// goes to the waiting candidate (not on the local backend, whose frozen
// holder keeps its flock).
func holdersSuite(t *testing.T, args func(key string) []string, ttl time.Duration, guardRefills, frozenRefills bool) {
	dir := t.TempDir()
	key := newKey("holders")
	mark := key + "-" + strconv.Itoa(os.Getpid())
	ledger := filepath.Join(dir, "ledger")
	fences, fenceEnv := newSlotFences(t, 3)
	script := `echo "$LEADER_SLOT $LEADER_EPOCH" >> ` + ledger + `; eval "export FENCE_ADDR=\$FENCE_ADDR_$LEADER_SLOT"; exec ` + fenceWriter(t)
	env := append([]string{"HOLDERS_TEST_MARK=" + mark}, fenceEnv...)
	w := watchSlots(mark, 3)
	procs := map[string]*Proc{}
	for i := range 5 {
		id := "c" + strconv.Itoa(i)
		procs[id] = start(t, id, env, withCommand(append(args(key), "--holders", "3", "--id", id), script)...)
	}
	testsupport.WaitFor(t, 30*time.Second, "3 slots filled", func() bool { return len(slotChildren(mark)) == 3 })

	// kill -9 of one holder: its guard kills the child and frees the slot.
	victim := slotChildren(mark)[0]
	procs[victim.id].Signal(syscall.SIGKILL)
	killed := time.Now()
	var refill time.Duration
	testsupport.WaitFor(t, ttl+15*time.Second, "slot refilled", func() bool {
		for _, k := range slotChildren(mark) {
			if k.slot == victim.slot && k.id != victim.id {
				refill = time.Since(killed)
				return true
			}
		}
		return false
	})
	t.Logf("kill -9 of the holder of slot %d -> slot refilled in %v (TTL %v)", victim.slot, refill.Round(time.Millisecond), ttl)
	if guardRefills && refill > ttl/2 {
		t.Errorf("slot refilled after %v: it waited for the TTL (%v) instead of the guard's release", refill, ttl)
	}

	// A frozen holder: its child dies (guard) before its slot goes to the
	// one candidate left; the watch sees any overlap.
	frozen := slotChildren(mark)[0]
	procs[frozen.id].Signal(syscall.SIGSTOP)
	testsupport.WaitFor(t, ttl+20*time.Second, "frozen holder's child dead", func() bool { return !alive(frozen.pid) })
	if frozenRefills {
		dead := time.Now()
		testsupport.WaitFor(t, ttl+20*time.Second, "frozen holder's slot refilled", func() bool {
			for _, k := range slotChildren(mark) {
				if k.slot == frozen.slot && k.id != frozen.id {
					return true
				}
			}
			return false
		})
		t.Logf("frozen holder of slot %d: child dead, slot refilled %v later", frozen.slot, time.Since(dead).Round(time.Millisecond))
	}
	procs[frozen.id].Signal(syscall.SIGCONT)

	// A candidate that asks for another number of slots is refused.
	bad := start(t, "two", env, withCommand(append(args(key), "--holders", "2", "--id", "bad"), "exit 0")...)
	if code := bad.Wait(20 * time.Second); code != 125 {
		t.Errorf("--holders 2 against 3: exit %d, want 125\n%s", code, bad.Output())
	} else if out := bad.Output(); !strings.Contains(out, "--holders 2") || !strings.Contains(out, "--holders 3") {
		t.Errorf("refusal does not name both numbers: %s", out)
	}
	time.Sleep(500 * time.Millisecond)
	w.end(t)
	checkSlotLedger(t, ledger)
	t.Logf("%d fenced writes accepted across the 3 slots", fences.check(t))
	for _, p := range procs {
		if !p.Exited() {
			p.Signal(syscall.SIGTERM)
		}
	}
	for _, p := range procs {
		p.Wait(20 * time.Second)
	}
	if kids := slotChildren(mark); len(kids) != 0 {
		t.Errorf("children left after every leaderrun stopped: %v", kids)
	}
}

func TestHoldersLocal(t *testing.T) {
	t.Parallel()
	lockDir := t.TempDir()
	holdersSuite(t, func(key string) []string { return localArgs(lockDir, key) }, 4*time.Second, true, false)
}

func TestHoldersEtcd(t *testing.T) {
	c := testcluster.StartEtcd(t, 1)
	eps := c.Endpoints()
	holdersSuite(t, func(key string) []string {
		return []string{"--backend", "etcd", "--etcd-endpoints", strings.Join(eps, ","), "--key", key,
			"--ttl", "8s", "--renew-interval", "1s", "--kill-grace", "1s", "--safety-margin", "500ms"}
	}, 8*time.Second, true, true)
}

// slowTTL makes a backend's timeline long enough that a refill through
// the guard and one after the TTL cannot be mistaken (the last --ttl
// given wins).
var slowTTL = []string{"--ttl", "8s", "--renew-interval", "1s", "--kill-grace", "1s", "--safety-margin", "500ms"}

func TestHoldersConsul(t *testing.T) {
	c := testcluster.StartConsul(t, testcluster.ConsulOptions{Servers: 1})
	addr := c.HTTPAddr(0)
	holdersSuite(t, func(key string) []string { return consulArgs(addr, key) }, 10*time.Second, true, true)
}

func TestHoldersZooKeeper(t *testing.T) {
	z := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 1, MaxSessionTimeout: 20 * time.Second})
	servers := z.Addrs()
	holdersSuite(t, func(key string) []string { return zkArgs(servers, key, slowTTL...) }, 8*time.Second, true, true)
}

func TestHoldersPostgres(t *testing.T) {
	pg := testcluster.StartPostgres(t)
	dsn := pg.DSN()
	holdersSuite(t, func(key string) []string { return pgArgs(dsn, key, slowTTL...) }, 8*time.Second, true, true)
}

func TestHoldersDynamoDB(t *testing.T) {
	d := testcluster.StartDynalite(t)
	d.SetEnv(t)
	ep := d.Endpoint()
	holdersSuite(t, func(key string) []string { return dynArgs(ep, key, slowTTL...) }, 8*time.Second, true, true)
}

func TestHoldersKubernetes(t *testing.T) {
	e := testcluster.StartEtcd(t, 1)
	k := testcluster.StartKube(t, e)
	admin := k.Kubeconfig(t, k.Token(testcluster.KubeAdmin), "")
	holdersSuite(t, func(key string) []string { return kubeArgs(admin, key, slowTTL...) }, 8*time.Second, true, true)
}

// TestHoldersSurface: the child's LEADER_SLOT and LEADER_HOLDERS, the
// metrics' slot label, status --holders listing every slot and the free
// ones, and check --slot.
func TestHoldersSurface(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key := newKey("surface")
	script := `env > ` + dir + `/$LEADER_ID.env; exec sleep 1000`
	a := start(t, "a", nil, withCommand(localArgs(dir, key, "--holders", "3", "--id", "a", "--http-addr", "127.0.0.1:0"), script)...)
	b := start(t, "b", nil, withCommand(localArgs(dir, key, "--holders", "3", "--id", "b"), script)...)
	childEnv := map[string]map[string]string{}
	for _, id := range []string{"a", "b"} {
		testsupport.WaitFor(t, 10*time.Second, id+"'s child environment", func() bool {
			raw, _ := os.ReadFile(filepath.Join(dir, id+".env"))
			if !strings.Contains(string(raw), "LEADER_EPOCH=") {
				return false
			}
			env := map[string]string{}
			for _, kv := range strings.Split(string(raw), "\n") {
				if k, v, ok := strings.Cut(kv, "="); ok {
					env[k] = v
				}
			}
			childEnv[id] = env
			return true
		})
		if e := childEnv[id]; e["LEADER_HOLDERS"] != "3" || e["LEADER_KEY"] != key || e["LEADER_SLOT"] == "" {
			t.Errorf("%s's child: LEADER_KEY=%q LEADER_SLOT=%q LEADER_HOLDERS=%q", id, e["LEADER_KEY"], e["LEADER_SLOT"], e["LEADER_HOLDERS"])
		}
	}
	sa, sb := childEnv["a"]["LEADER_SLOT"], childEnv["b"]["LEADER_SLOT"]
	if sa == sb {
		t.Fatalf("both children in slot %s", sa)
	}

	_, metrics := testsupport.HTTPGet(t, httpAddr(t, a), "/metrics")
	if want := `leaderrun_info{id="a",key="` + key + `",slot="` + sa + `"} 1`; !strings.Contains(metrics, want) {
		t.Errorf("metrics lack %s:\n%s", want, grepLines(metrics, "leaderrun_info"))
	}

	status := exec.Command(binary, "status", "--backend", "local", "--lock-dir", dir, "--holders", "3", "--json", key)
	out, err := status.Output()
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	var report struct {
		Holders int `json:"holders"`
		Slots   []struct {
			Slot   int `json:"slot"`
			Leader *struct {
				ID    string `json:"id"`
				Epoch uint64 `json:"epoch"`
			} `json:"leader"`
		} `json:"slots"`
		Free []int `json:"free"`
	}
	if err := json.Unmarshal(out, &report); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	held := map[string]string{}
	for _, s := range report.Slots {
		if s.Leader != nil {
			held[strconv.Itoa(s.Slot)] = s.Leader.ID
		}
	}
	if report.Holders != 3 || len(report.Slots) != 3 || len(report.Free) != 1 || held[sa] != "a" || held[sb] != "b" {
		t.Errorf("status --holders 3: %s", out)
	}

	check := func(slot, epoch string) int {
		cmd := exec.Command(binary, "check", "--backend", "local", "--lock-dir", dir, "--slot", slot, "--epoch", epoch, key)
		return exitStatus(cmd.Run())
	}
	epoch := childEnv["a"]["LEADER_EPOCH"]
	if code := check(sa, epoch); code != 0 {
		t.Errorf("check --slot %s --epoch %s (a's own): exit %d, want 0", sa, epoch, code)
	}
	free := strconv.Itoa(report.Free[0])
	if code := check(free, epoch); code != 1 {
		t.Errorf("check --slot %s (free): exit %d, want 1", free, code)
	}
	a.Signal(syscall.SIGTERM)
	b.Signal(syscall.SIGTERM)
	a.Wait(10 * time.Second)
	b.Wait(10 * time.Second)
}

func grepLines(s, what string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, what) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// holdersCutOff: with --holders 3 and 4 candidates, the one that reaches
// the server at addr through a proxy (via(key, proxy) are its options)
// is cut off while it holds a slot. Its child must be dead before anyone
// else's child runs in that slot, and it exits 123; the slot goes to the
// fourth candidate.
func holdersCutOff(t *testing.T, addr string, via func(key, proxy string) []string, direct func(key string) []string, ttl time.Duration) {
	px, err := chaos.NewProxy(addr, chaos.Raw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	key, mark, env := markedKey("holders-cut")
	script := "exec sleep 1000"
	w := watchSlots(mark, 3)
	a := start(t, "a", env, withCommand(append(via(key, px.Addr()), "--holders", "3", "--id", "a"), script)...)
	var cutSlot, cutPid int
	testsupport.WaitFor(t, 30*time.Second, "a's child", func() bool {
		for _, k := range slotChildren(mark) {
			if k.id == "a" {
				cutSlot, cutPid = k.slot, k.pid
				return true
			}
		}
		return false
	})
	for _, id := range []string{"b", "c", "d"} {
		start(t, id, env, withCommand(append(direct(key), "--holders", "3", "--id", id), script)...)
	}
	testsupport.WaitFor(t, 30*time.Second, "3 slots filled", func() bool { return len(slotChildren(mark)) == 3 })
	time.Sleep(time.Second) // the fourth candidate queues
	px.Cut(chaos.Blackhole)
	cut := time.Now()
	var deadAt time.Duration
	testsupport.WaitFor(t, ttl+20*time.Second, "the cut-off holder's slot taken over", func() bool {
		if deadAt == 0 && !alive(cutPid) {
			deadAt = time.Since(cut)
		}
		for _, k := range slotChildren(mark) {
			if k.slot == cutSlot && k.id != "a" {
				if alive(cutPid) {
					t.Errorf("slot %d went to %s while the cut-off holder's child %d lived", cutSlot, k.id, cutPid)
				}
				return true
			}
		}
		return false
	})
	t.Logf("cut -> a's child dead after %v, slot %d refilled after %v (TTL %v)", deadAt.Round(time.Millisecond), cutSlot, time.Since(cut).Round(time.Millisecond), ttl)
	if code := a.Wait(20 * time.Second); code != 123 {
		t.Errorf("cut-off holder exit %d, want 123", code)
	}
	w.end(t)
}

func TestHoldersCutOffEtcd(t *testing.T) {
	c := testcluster.StartEtcd(t, 1)
	ep := c.Endpoints()[0]
	args := func(key, endpoint string) []string {
		return []string{"--backend", "etcd", "--etcd-endpoints", endpoint, "--key", key,
			"--ttl", "4s", "--renew-interval", "500ms", "--kill-grace", "1s", "--safety-margin", "500ms"}
	}
	holdersCutOff(t, strings.TrimPrefix(ep, "http://"), func(key, px string) []string { return args(key, "http://"+px) },
		func(key string) []string { return args(key, ep) }, 4*time.Second)
}

func TestHoldersCutOffPostgres(t *testing.T) {
	pg := testcluster.StartPostgres(t)
	holdersCutOff(t, pg.Addr(), func(key, px string) []string { return pgArgs(strings.Replace(pg.DSN(), pg.Addr(), px, 1), key) },
		func(key string) []string { return pgArgs(pg.DSN(), key) }, 3*time.Second)
}

func TestHoldersCutOffConsul(t *testing.T) {
	c := testcluster.StartConsul(t, testcluster.ConsulOptions{Servers: 1})
	addr := c.HTTPAddr(0)
	holdersCutOff(t, strings.TrimPrefix(addr, "http://"), func(key, px string) []string { return consulArgs(px, key) },
		func(key string) []string { return consulArgs(addr, key) }, 10*time.Second)
}

func TestHoldersCutOffZooKeeper(t *testing.T) {
	z := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 1})
	addr := z.Addrs()[0]
	holdersCutOff(t, addr, func(key, px string) []string { return zkArgs([]string{px}, key) },
		func(key string) []string { return zkArgs([]string{addr}, key) }, 3*time.Second)
}

func TestHoldersCutOffKubernetes(t *testing.T) {
	e := testcluster.StartEtcd(t, 1)
	k := testcluster.StartKube(t, e)
	token := k.Token(testcluster.KubeAdmin)
	direct := k.Kubeconfig(t, token, "")
	holdersCutOff(t, strings.TrimPrefix(k.URL(), "https://"),
		func(key, px string) []string { return kubeArgs(k.KubeconfigAt(t, px, token, ""), key) },
		func(key string) []string { return kubeArgs(direct, key) }, 3*time.Second)
}

// TestHoldersCutOffDynamoDB sets dynalite's fake credentials for every
// leaderrun it starts: not parallel.
func TestHoldersCutOffDynamoDB(t *testing.T) {
	d := testcluster.StartDynalite(t)
	d.SetEnv(t)
	holdersCutOff(t, d.Addr(), func(key, px string) []string { return dynArgs("http://"+px, key) },
		func(key string) []string { return dynArgs(d.Endpoint(), key) }, 3*time.Second)
}

// TestHoldersWaitingServesHealth: a --holders candidate waiting for a slot
// (all held) serves /healthz and /status as campaigning, as a single-key
// standby does, so that systemd's READY=1 and a probe do not wait for a
// slot; once it wins one, its metrics name the slot.
func TestHoldersWaitingServesHealth(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key := newKey("waiting")
	a := start(t, "a", nil, withCommand(localArgs(dir, key, "--holders", "2", "--id", "a"), "exec sleep 1000")...)
	c := start(t, "c", nil, withCommand(localArgs(dir, key, "--holders", "2", "--id", "c"), "exec sleep 1000")...)
	testsupport.WaitFor(t, 10*time.Second, "both slots held", func() bool {
		return strings.Contains(a.Output(), "child started") && strings.Contains(c.Output(), "child started")
	})
	b := start(t, "b", nil, withCommand(localArgs(dir, key, "--holders", "2", "--id", "b", "--http-addr", "127.0.0.1:0"), "exec sleep 1000")...)
	addr := httpAddr(t, b)
	code, body := testsupport.HTTPGet(t, addr, "/healthz")
	if code != 200 {
		t.Errorf("/healthz of a waiting --holders candidate: %d %s", code, body)
	}
	_, status := testsupport.HTTPGet(t, addr, "/status")
	if !strings.Contains(status, `"role": "campaigning"`) {
		t.Errorf("/status of a waiting --holders candidate: %s", status)
	}
	for _, p := range []*Proc{a, b, c} {
		p.Signal(syscall.SIGTERM)
	}
	for _, p := range []*Proc{a, b, c} {
		p.Wait(10 * time.Second)
	}
}
