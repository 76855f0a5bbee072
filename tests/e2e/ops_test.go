package e2e

// Operating leaderrun: `status` and `check` against real backends, the
// --http-addr endpoints, systemd notification and watchdog, the generated
// man page and completions, the systemd unit and the packages.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testcluster"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

var opsKeySeq atomic.Int64

// opsKey is a key no other test uses, also across runs on a shared server.
func opsKey(name string) string {
	return fmt.Sprintf("ops-%s-%d-%d", name, os.Getpid(), opsKeySeq.Add(1))
}

// opsLocalArgs runs on the local backend with a timeline whose kill point
// is 6.5s after the last renewal, so a test can freeze the loop for a few
// seconds without losing leadership.
func opsLocalArgs(lockDir, key string, extra ...string) []string {
	args := append(localBackend(lockDir, key), "--ttl", "8s", "--renew-interval", "300ms", "--kill-grace", "1s", "--safety-margin", "500ms")
	return append(args, extra...)
}

// localBackend selects the local backend and a key: the options status and
// check share with a run.
func localBackend(lockDir, key string) []string {
	return []string{"--backend", "local", "--lock-dir", lockDir, "--key", key}
}

// runOnce runs leaderrun to completion and returns its exit code, stdout,
// stderr and how long it took.
func runOnce(t *testing.T, env []string, args ...string) (code int, stdout, stderr string, took time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	began := time.Now()
	err := cmd.Run()
	took = time.Since(began)
	if ctx.Err() != nil {
		t.Fatalf("leaderrun %v did not finish within 30s", args)
	}
	return exitStatus(err), out.String(), errOut.String(), took
}

// statusJSON is `leaderrun status --json`, decoded.
type statusJSON struct {
	Key     string `json:"key"`
	Backend string `json:"backend"`
	Leader  *struct {
		ID                    string    `json:"id"`
		Hostname              string    `json:"hostname"`
		PID                   int       `json:"pid"`
		Epoch                 uint64    `json:"epoch"`
		AcquiredAt            time.Time `json:"acquired_at"`
		LeaseRemainingSeconds *float64  `json:"lease_remaining_seconds"`
	} `json:"leader"`
	NeverUsed bool   `json:"never_used"`
	LookedAt  string `json:"looked_at"`
}

func readEpoch(t *testing.T, path string) uint64 {
	t.Helper()
	return uint64(readPID(t, path))
}

func readInt(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return n
}

// checkingChild is a child that runs `leaderrun check` with no flags at
// all, records its exit code, then its epoch, and stays.
func checkingChild(dir, name string) []string {
	script := fmt.Sprintf(`"$LR" check; echo $? > %[1]s/%[2]s.check; echo $LEADER_EPOCH > %[1]s/%[2]s.epoch; exec sleep 1000`, dir, name)
	return []string{"--", "sh", "-c", script}
}

// statusAndCheck is the scenario every backend must pass: status and check
// on a key never used, with A leading (also `check` from A's child), right
// after B took over from a kill -9'd A, and once nobody leads the used
// key. args select the backend and key (what status and check take);
// timing is added for the runs; where is what "looked at" must name.
func statusAndCheck(t *testing.T, backend string, args, timing []string, takeover time.Duration, lease func(*float64) error, where ...string) {
	dir := t.TempDir()
	env := []string{"LR=" + binary}
	run := append(append([]string(nil), args...), timing...)
	key := args[slices.Index(args, "--key")+1]

	// Nobody ever used the key: status says so, where it looked, exit 3.
	code, out, errOut, _ := runOnce(t, env, append([]string{"status"}, args...)...)
	line := regexp.MustCompile(`^leaderrun: key "` + regexp.QuoteMeta(key) + `" was never used at (.+) — check the key(, --[a-z-]+)* and --[a-z-]+\n$`).FindStringSubmatch(errOut)
	if code != 3 || line == nil || !regexp.MustCompile(`(?m)^leader\s+no leader, key never used$`).MatchString(out) ||
		!strings.Contains(out, line[1]) {
		t.Fatalf("status of a key never used: exit %d\n%s%s", code, out, errOut)
	}
	for _, w := range where {
		if !strings.Contains(line[1], w) {
			t.Errorf("status of a key never used: %q does not name %q", line[1], w)
		}
	}
	t.Logf("%s: %s", backend, strings.TrimSpace(errOut))
	code, out, _, _ = runOnce(t, env, append([]string{"status", "--json"}, args...)...)
	var st statusJSON
	if err := json.Unmarshal([]byte(out), &st); code != 3 || err != nil || st.Leader != nil || st.Backend != backend || !st.NeverUsed || st.LookedAt != line[1] {
		t.Fatalf("status --json of a key never used: exit %d, %v\n%s", code, err, out)
	}
	code, _, errOut, _ = runOnce(t, env, append([]string{"check", "--epoch", "1"}, args...)...)
	if code != 1 || !strings.Contains(errOut, "no leader, the key was never used at "+line[1]) {
		t.Fatalf("check of a key never used: exit %d, stderr %q", code, errOut)
	}

	a := start(t, "A", env, append(append([]string{"--id", "host-a"}, run...), checkingChild(dir, "a")...)...)
	ea := readEpoch(t, dir+"/a.epoch")
	if c := readInt(t, dir+"/a.check"); c != 0 {
		t.Fatalf("`leaderrun check` with no flags inside A's child exited %d, want 0\n%s", c, a.Output())
	}

	code, out, errOut, _ = runOnce(t, env, append([]string{"status"}, args...)...)
	for _, want := range []string{`leader\s+host-a`, `pid\s+` + strconv.Itoa(a.Pid()), `epoch\s+` + strconv.FormatUint(ea, 10)} {
		if !regexp.MustCompile(`(?m)^` + want + `$`).MatchString(out) {
			t.Errorf("status lacks %q: exit %d\n%s%s", want, code, out, errOut)
		}
	}
	code, out, _, _ = runOnce(t, env, append([]string{"status", "--json"}, args...)...)
	st = statusJSON{}
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || st.Leader == nil {
		t.Fatalf("status --json while A leads: exit %d, %v\n%s", code, err, out)
	}
	if l := st.Leader; l.ID != "host-a" || l.PID != a.Pid() || l.Epoch != ea || time.Since(l.AcquiredAt) > time.Minute || l.Hostname == "" {
		t.Errorf("status --json while A leads: %s", out)
	}
	if err := lease(st.Leader.LeaseRemainingSeconds); err != nil {
		t.Errorf("status --json lease_remaining_seconds: %v\n%s", err, out)
	}
	if code, _, errOut, _ := runOnce(t, env, append([]string{"check", "--epoch", strconv.FormatUint(ea, 10)}, args...)...); code != 0 {
		t.Fatalf("check of A's epoch while A leads: exit %d: %s", code, errOut)
	}

	// B waits; A dies without a word; B takes over.
	b := start(t, "B", env, append(append([]string{"--id", "host-b"}, run...), checkingChild(dir, "b")...)...)
	waitFor(t, 10*time.Second, "B to campaign", func() bool { return strings.Contains(b.Output(), "waiting for the holder") })
	a.Signal(syscall.SIGKILL)
	a.Wait(5 * time.Second)
	waitFor(t, takeover, "B's child to start", func() bool { _, err := os.Stat(dir + "/b.epoch"); return err == nil })
	eb := readEpoch(t, dir+"/b.epoch")
	if eb <= ea {
		t.Fatalf("B's epoch %d is not above A's %d", eb, ea)
	}

	// One read tells A's epoch it is over, and who leads now.
	code, _, errOut, took := runOnce(t, env, append([]string{"check", "--epoch", strconv.FormatUint(ea, 10)}, args...)...)
	if code != 1 || !strings.Contains(errOut, "host-b") || !strings.Contains(errOut, "with epoch "+strconv.FormatUint(eb, 10)) {
		t.Fatalf("check of A's epoch after B took over: exit %d, stderr %q", code, errOut)
	}
	t.Logf("%s: check of a stale epoch answered 1 in %v (process start included): %s", backend, took.Round(time.Millisecond), strings.TrimSpace(errOut))
	if code, _, errOut, _ := runOnce(t, env, append([]string{"check", "--epoch", strconv.FormatUint(eb, 10)}, args...)...); code != 0 {
		t.Fatalf("check of B's epoch: exit %d: %s", code, errOut)
	}
	if c := readInt(t, dir+"/b.check"); c != 0 {
		t.Fatalf("`leaderrun check` inside B's child exited %d, want 0", c)
	}
	b.Signal(syscall.SIGTERM)
	b.Wait(20 * time.Second)

	// Nobody leads the used key: "no leader", exit 0.
	code, out, errOut, _ = runOnce(t, env, append([]string{"status"}, args...)...)
	if code != 0 || !regexp.MustCompile(`(?m)^leader\s+no leader$`).MatchString(out) || errOut != "" {
		t.Fatalf("status with no leader: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _, _ = runOnce(t, env, append([]string{"status", "--json"}, args...)...)
	st = statusJSON{}
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || st.Leader != nil || st.NeverUsed || strings.Contains(out, "looked_at") {
		t.Fatalf("status --json with no leader: exit %d, %v\n%s", code, err, out)
	}
	code, _, errOut, _ = runOnce(t, env, append([]string{"check", "--epoch", "1"}, args...)...)
	if code != 1 || !strings.HasSuffix(errOut, ": no leader\n") {
		t.Fatalf("check with no leader: exit %d, stderr %q", code, errOut)
	}
}

func TestStatusAndCheck(t *testing.T) {
	t.Run("local", func(t *testing.T) {
		t.Parallel()
		timing := []string{"--ttl", "4s", "--renew-interval", "300ms", "--kill-grace", "1s", "--safety-margin", "500ms"}
		locks := t.TempDir()
		statusAndCheck(t, "local", localBackend(locks, opsKey("local")), timing, 10*time.Second, func(left *float64) error {
			if left != nil {
				return fmt.Errorf("%v, want null: a flock does not expire", *left)
			}
			return nil
		}, locks+" (local lock dir)")
	})
	t.Run("etcd", func(t *testing.T) {
		t.Parallel()
		c := testcluster.StartEtcd(t, 1)
		args := []string{"--backend", "etcd", "--etcd-endpoints", strings.Join(c.Endpoints(), ","), "--key", opsKey("etcd")}
		timing := []string{"--ttl", "3s", "--renew-interval", "500ms", "--kill-grace", "1s", "--safety-margin", "500ms"}
		statusAndCheck(t, "etcd", args, timing, 20*time.Second, func(left *float64) error {
			if left == nil || *left <= 0 || *left > 3 {
				return fmt.Errorf("%v, want the lease's TimeToLive, in (0, 3s]", left)
			}
			return nil
		}, "/leaderrun/"+args[len(args)-1]+"/ on etcd "+c.Endpoints()[0])
	})
	t.Run("consul", func(t *testing.T) {
		t.Parallel()
		c := testcluster.StartConsul(t, testcluster.ConsulOptions{})
		args := []string{"--backend", "consul", "--consul-addr", c.HTTPAddr(0), "--key", opsKey("consul")}
		timing := []string{"--ttl", "10s", "--renew-interval", "2s", "--kill-grace", "1s", "--safety-margin", "500ms"}
		// Consul may keep an expired session up to 2 x TTL, plus lock-delay.
		statusAndCheck(t, "consul", args, timing, 30*time.Second, func(left *float64) error {
			if left == nil || *left != 10 {
				return fmt.Errorf("%v, want the session TTL, 10", left)
			}
			return nil
		}, "KV leaderrun/"+args[len(args)-1]+" on Consul "+c.HTTPAddr(0))
	})
}

func TestCheckNeedsAnEpochOutsideAChild(t *testing.T) {
	t.Parallel()
	code, _, errOut, _ := runOnce(t, nil, append([]string{"check"}, localBackend(t.TempDir(), "k")...)...)
	if code != 125 || strings.Count(strings.TrimSpace(errOut), "\n") != 0 || !strings.Contains(errOut, "--epoch") {
		t.Fatalf("check without epoch: exit %d, stderr %q; want one line naming --epoch and 125", code, errOut)
	}
	code, _, errOut, _ = runOnce(t, nil, "check", "--backend", "etcd", "--etcd-endpoints", "127.0.0.1:1", "--etcd-dial-timeout", "300ms",
		"--key", "k", "--epoch", "3", "--timeout", "2s")
	if code != 125 {
		t.Fatalf("check with the backend down: exit %d, want 125; stderr %q", code, errOut)
	}
}

// httpAddr is the address leaderrun logged for its endpoints.
func httpAddr(t *testing.T, p *Proc) string {
	t.Helper()
	re := regexp.MustCompile(`serving /healthz, /status and /metrics: addr=(\S+)`)
	var addr string
	waitFor(t, 10*time.Second, "the endpoints to be served", func() bool {
		m := re.FindStringSubmatch(p.Output())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	return addr
}

// waitMetrics polls /metrics until every series has the wanted value.
func waitMetrics(t *testing.T, addr string, within time.Duration, want map[string]float64) string {
	t.Helper()
	var body string
	waitFor(t, within, fmt.Sprintf("metrics %v", want), func() bool {
		_, body = testsupport.HTTPGet(t, addr, "/metrics")
		for name, v := range want {
			if got, ok := testsupport.Metric(body, name); !ok || got != v {
				return false
			}
		}
		return true
	})
	return body
}

func TestMetricsAndHealthzThroughLossAndFreeze(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key := opsKey("metrics")
	freeze := dir + "/freeze"
	p := start(t, "leader", []string{"LEADERRUN_TEST_FREEZE_FILE=" + freeze},
		withCommand(opsLocalArgs(dir, key, "--on-lost", "rejoin", "--http-addr", "127.0.0.1:0"),
			"echo $LEADER_EPOCH >> "+dir+"/epochs; exec sleep 1000")...)
	addr := httpAddr(t, p)
	e1 := readEpoch(t, dir+"/epochs")
	waitMetrics(t, addr, 5*time.Second, map[string]float64{
		"leaderrun_is_leader": 1, "leaderrun_epoch": float64(e1),
		"leaderrun_leadership_acquired_total": 1, "leaderrun_child_starts_total": 1,
		"leaderrun_leadership_lost_total": 0,
	})
	var st struct {
		Role     string  `json:"role"`
		Key      string  `json:"key"`
		Epoch    uint64  `json:"epoch"`
		Left     float64 `json:"lease_remaining_seconds"`
		ChildPID int     `json:"child_pid"`
		ID       string  `json:"id"`
	}
	code, body := testsupport.HTTPGet(t, addr, "/status")
	if err := json.Unmarshal([]byte(body), &st); err != nil || code != 200 || st.Role != "leader" || st.Key != key ||
		st.Epoch != e1 || st.ChildPID == 0 || st.Left <= 0 || st.Left > 8 || st.ID == "" {
		t.Fatalf("/status while leading: %d %v\n%s", code, err, body)
	}
	if code, body := testsupport.HTTPGet(t, addr, "/healthz"); code != 200 {
		t.Fatalf("/healthz while leading: %d %s", code, body)
	}

	// Take the key away: a new lock file, held by this test, replaces it.
	lockPath := filepath.Join(dir, "leaderrun", key+".lock")
	if err := os.Remove(lockPath); err != nil {
		t.Fatal(err)
	}
	thief, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(thief.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	waitMetrics(t, addr, 10*time.Second, map[string]float64{
		"leaderrun_is_leader": 0, "leaderrun_leadership_lost_total": 1, "leaderrun_epoch": 0,
	})
	waitFor(t, 5*time.Second, "/status to say campaigning", func() bool {
		_, body := testsupport.HTTPGet(t, addr, "/status")
		return strings.Contains(body, `"role": "campaigning"`)
	})

	// Give it back: leaderrun rejoined and wins again with a higher epoch.
	thief.Close()
	body = waitMetrics(t, addr, 10*time.Second, map[string]float64{
		"leaderrun_is_leader": 1, "leaderrun_leadership_acquired_total": 2, "leaderrun_child_starts_total": 2,
	})
	if e2, _ := testsupport.Metric(body, "leaderrun_epoch"); e2 <= float64(e1) {
		t.Fatalf("epoch after rejoining %v, want > %d", e2, e1)
	}

	// Freeze the event loop: first it counts as stuck, then the lease
	// passes its deadline while nobody renews it.
	if err := os.WriteFile(freeze, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	frozenAt := time.Now()
	waitFor(t, 5*time.Second, "/healthz 503 for a stuck loop", func() bool {
		code, body := testsupport.HTTPGet(t, addr, "/healthz")
		return code == 503 && strings.Contains(body, "event loop stuck")
	})
	t.Logf("/healthz said 503 (stuck) %v after the freeze", time.Since(frozenAt).Round(time.Millisecond))
	waitFor(t, 15*time.Second, "/healthz 503 for a lease past its deadline", func() bool {
		code, body := testsupport.HTTPGet(t, addr, "/healthz")
		return code == 503 && strings.Contains(body, "lease past its deadline")
	})
	if _, body := testsupport.HTTPGet(t, addr, "/metrics"); !regexp.MustCompile(`(?m)^leaderrun_lease_remaining_seconds -`).MatchString(body) {
		t.Errorf("lease_remaining_seconds not negative past the deadline:\n%s", body)
	}
	if err := os.Remove(freeze); err != nil {
		t.Fatal(err)
	}
	p.Signal(syscall.SIGTERM)
	p.Wait(20 * time.Second)
}

// notifyListener plays systemd's side of NOTIFY_SOCKET.
var notifyListener = testsupport.NotifySocket

// expectNotify waits for a notification containing want.
var expectNotify = testsupport.ExpectNotify

func TestSystemdNotifyAndWatchdog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key := opsKey("notify")
	freeze := dir + "/freeze"
	sock, msgs := notifyListener(t)
	// systemd's WatchdogSec=400ms: leaderrun pings every 200ms.
	env := []string{"NOTIFY_SOCKET=" + sock, "WATCHDOG_USEC=400000", "LEADERRUN_TEST_FREEZE_FILE=" + freeze}
	p := start(t, "leader", env, withCommand(opsLocalArgs(dir, key, "--http-addr", "127.0.0.1:0"),
		"env > "+dir+"/child.env; exec sleep 1000")...)
	addr := httpAddr(t, p)

	expectNotify(t, msgs, "READY=1", 10*time.Second)
	expectNotify(t, msgs, "STATUS=leader of "+key+", epoch 1", 10*time.Second)
	for i := 0; i < 3; i++ {
		expectNotify(t, msgs, "WATCHDOG=1", 2*time.Second)
	}
	waitFor(t, 5*time.Second, "the child's environment", func() bool { _, err := os.Stat(dir + "/child.env"); return err == nil })
	waitFor(t, 5*time.Second, "the child's environment to be written", func() bool {
		b, _ := os.ReadFile(dir + "/child.env")
		return strings.Contains(string(b), "LEADER_EPOCH=")
	})
	childEnv, _ := os.ReadFile(dir + "/child.env")
	// The child's NOTIFY_SOCKET is leaderrun's own socket for the job,
	// never systemd's, and systemd's watchdog is not passed on.
	if regexp.MustCompile(`(?m)^NOTIFY_SOCKET=` + regexp.QuoteMeta(sock) + `$`).Match(childEnv) {
		t.Errorf("the child's environment has systemd's NOTIFY_SOCKET=%s", sock)
	}
	if !regexp.MustCompile(`(?m)^NOTIFY_SOCKET=.*/leaderrun-notify-`).Match(childEnv) {
		t.Errorf("the child's environment lacks leaderrun's own NOTIFY_SOCKET:\n%s", childEnv)
	}
	for _, banned := range []string{"WATCHDOG_USEC=", "WATCHDOG_PID="} {
		if regexp.MustCompile(`(?m)^` + banned).Match(childEnv) {
			t.Errorf("the child's environment has %s", banned)
		}
	}

	// The event loop blocks: once /healthz calls it stuck, no more pings.
	if err := os.WriteFile(freeze, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "/healthz 503 for a stuck loop", func() bool {
		code, _ := testsupport.HTTPGet(t, addr, "/healthz")
		return code == 503
	})
	// A ping decided just before the verdict flipped may still arrive.
	testsupport.DrainNotify(msgs, 300*time.Millisecond)
	if _, ok := testsupport.NextNotify(msgs, "WATCHDOG=1", 1200*time.Millisecond); ok { // six ping intervals
		t.Fatalf("watchdog ping while the event loop is blocked")
	}

	// It turns again before the kill point: pings resume.
	if err := os.Remove(freeze); err != nil {
		t.Fatal(err)
	}
	expectNotify(t, msgs, "WATCHDOG=1", 3*time.Second)

	p.Signal(syscall.SIGTERM)
	expectNotify(t, msgs, "STOPPING=1", 10*time.Second)
	if code := p.Wait(20 * time.Second); code != 143 {
		t.Fatalf("exit %d after SIGTERM, want 143 (the child's SIGTERM)", code)
	}
}

// TestReadyMeansTheBackendAnswered: on etcd a standby is READY=1 as soon as
// the backend answered, while it still waits for the key; one whose backend
// cannot be reached is not.
func TestReadyMeansTheBackendAnswered(t *testing.T) {
	t.Parallel()
	c := testcluster.StartEtcd(t, 1)
	dir := t.TempDir()
	key := opsKey("ready")
	backend := []string{"--backend", "etcd", "--key", key,
		"--ttl", "3s", "--renew-interval", "500ms", "--kill-grace", "1s", "--safety-margin", "500ms"}
	leader := start(t, "leader", nil, append(append([]string{"--etcd-endpoints", strings.Join(c.Endpoints(), ",")}, backend...),
		"--", "sh", "-c", "touch "+dir+"/leading; exec sleep 1000")...)
	waitFor(t, 10*time.Second, "the leader's child", func() bool { _, err := os.Stat(dir + "/leading"); return err == nil })

	sockDown, msgsDown := notifyListener(t)
	down := start(t, "unreachable", []string{"NOTIFY_SOCKET=" + sockDown},
		append(append([]string{"--etcd-endpoints", "127.0.0.1:1", "--etcd-dial-timeout", "200ms"}, backend...), "--", "true")...)
	sock, msgs := notifyListener(t)
	standby := start(t, "standby", []string{"NOTIFY_SOCKET=" + sock},
		append(append([]string{"--etcd-endpoints", strings.Join(c.Endpoints(), ",")}, backend...), "--", "true")...)

	expectNotify(t, msgs, "READY=1", 10*time.Second)
	// Its log line may reach us a moment after its notification.
	waitFor(t, 2*time.Second, "the standby's waiting line", func() bool { return strings.Contains(standby.Output(), "waiting for the holder") })
	if out := standby.Output(); strings.Contains(out, "child started") || !strings.Contains(out, "waiting for the holder") {
		t.Fatalf("READY=1 came from a standby that is not campaigning:\n%s", standby.Output())
	}
	// The unreachable one has had as long, and more: still not ready.
	drained := time.After(time.Second)
	for done := false; !done; {
		select {
		case m := <-msgsDown:
			if strings.Contains(m, "READY=1") {
				t.Fatalf("READY=1 without an answer from the backend: %q\n%s", m, down.Output())
			}
		case <-drained:
			done = true
		}
	}
	for _, p := range []*Proc{standby, down, leader} {
		p.Signal(syscall.SIGTERM)
		p.Wait(20 * time.Second)
	}
}

func TestHTTPAddrInUseExits125(t *testing.T) {
	t.Parallel()
	ln := testsupport.Listen(t)
	dir := t.TempDir()
	code, out, errOut, _ := runOnce(t, nil, withCommand(opsLocalArgs(dir, "k", "--http-addr", ln.Addr().String()), "touch "+dir+"/ran")...)
	if code != 125 || strings.Count(strings.TrimSpace(errOut), "\n") != 0 || !strings.Contains(errOut, "--http-addr "+ln.Addr().String()) {
		t.Fatalf("exit %d, want 125 with one line naming --http-addr:\n%s%s", code, out, errOut)
	}
	if _, err := os.Stat(dir + "/ran"); err == nil {
		t.Fatal("the command ran although leaderrun could not serve --http-addr")
	}
}

// A command named like a subcommand, after "--", is still the command.
func TestDoubleDashRunsACommandNamedLikeASubcommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"status", "check"} {
		script := fmt.Sprintf("#!/bin/sh\necho \"$@\" > %s/%s.ran\nexit 7\n", dir, name)
		if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		env := []string{"PATH=" + bin + ":" + os.Getenv("PATH")}
		code, out, errOut, _ := runOnce(t, env, append(opsLocalArgs(dir, "dd-"+name), "--", name, "--json", "-x")...)
		if code != 7 {
			t.Fatalf("-- %s: exit %d, want the program's 7\n%s%s", name, code, out, errOut)
		}
		if b, err := os.ReadFile(filepath.Join(dir, name+".ran")); err != nil || strings.TrimSpace(string(b)) != "--json -x" {
			t.Fatalf("-- %s: the program did not run with its arguments: %q %v", name, b, err)
		}
	}
}

func TestGeneratedManPageAndCompletions(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()

	code, man, errOut, _ := runOnce(t, nil, "gen", "man")
	if code != 0 || !strings.Contains(man, ".TH LEADERRUN 1") {
		t.Fatalf("gen man: exit %d %s\n%.300s", code, errOut, man)
	}
	for _, want := range []string{"status", "check", `\-\-http\-addr`, `\-\-epoch`, "EXIT STATUS", "123"} {
		if !strings.Contains(man, want) {
			t.Errorf("man page lacks %q", want)
		}
	}
	if strings.Contains(man, "__guard") || regexp.MustCompile(`(?m)^\.SH.*\bgen\b|^gen$`).MatchString(man) {
		t.Error("man page shows a hidden command")
	}
	if path, err := exec.LookPath("man"); err == nil {
		page := filepath.Join(dir, "leaderrun.1")
		if err := os.WriteFile(page, []byte(man), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(path, "--warnings", "-l", page)
		cmd.Env = append(os.Environ(), "MANWIDTH=80", "MAN_KEEP_FORMATTING=0", "PAGER=cat")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		rendered, err := cmd.Output()
		if err != nil || stderr.Len() > 0 || !strings.Contains(string(rendered), "leaderrun check") {
			t.Errorf("man renders with err=%v, warnings:\n%s", err, stderr.String())
		}
	}

	code, bashScript, _, _ := runOnce(t, nil, "gen", "bash")
	if code != 0 {
		t.Fatalf("gen bash: exit %d", code)
	}
	script := filepath.Join(dir, "leaderrun.bash")
	if err := os.WriteFile(script, []byte(bashScript), 0o644); err != nil {
		t.Fatal(err)
	}
	complete := func(words ...string) string {
		t.Helper()
		driver := `source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _leaderrun; printf '%s\n' "${COMPREPLY[@]}"`
		out, err := exec.Command("bash", append([]string{"-c", driver, "bash", script, binary}, words...)...).Output()
		if err != nil {
			t.Fatalf("bash completion of %q: %v", words, err)
		}
		return strings.Join(strings.Fields(string(out)), " ")
	}
	for _, c := range []struct {
		words []string
		want  string
	}{
		{[]string{""}, "status history check step-down pause resume version"},
		{[]string{"step-down", "--t"}, "--timeout --to"},
		{[]string{"--http"}, "--http-addr"},
		{[]string{"--backend", ""}, backendNames(t)},
		{[]string{"check", "--ep"}, "--epoch"},
		{[]string{"status", "--js"}, "--json"},
		{[]string{"history", "--li"}, "--limit"},
	} {
		if got := complete(c.words...); got != c.want {
			t.Errorf("bash completion of %q = %q, want %q", c.words, got, c.want)
		}
	}

	code, zshScript, _, _ := runOnce(t, nil, "gen", "zsh")
	if code != 0 || !strings.HasPrefix(zshScript, "#compdef leaderrun\n") {
		t.Fatalf("gen zsh: exit %d\n%.200s", code, zshScript)
	}
	if zsh, err := exec.LookPath("zsh"); err == nil {
		zf := filepath.Join(dir, "_leaderrun")
		if err := os.WriteFile(zf, []byte(zshScript), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(zsh, "-n", zf).CombinedOutput(); err != nil {
			t.Errorf("zsh -n: %v\n%s", err, out)
		}
	} else {
		t.Log("zsh not installed: the zsh script's syntax is not checked")
	}
}

// repoFile is a file of the repository, found from this package's folder.
func repoFile(t *testing.T, rel string) string {
	t.Helper()
	path := filepath.Join("..", "..", rel)
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSystemdUnitVerifies runs systemd-analyze verify on the packaged unit,
// with ExecStart pointed at the binary under test. verify exits 0 even with
// warnings, so any output on stderr fails the test.
func TestSystemdUnitVerifies(t *testing.T) {
	t.Parallel()
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("systemd-analyze not installed")
		}
		t.Skip("systemd-analyze not installed (apt-get install systemd)")
	}
	unit, err := os.ReadFile(repoFile(t, "packaging/systemd/leaderrun@.service"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(unit)
	for _, want := range []string{"Type=notify", "NotifyAccess=main", "WatchdogSec=", "KillMode=mixed",
		"EnvironmentFile=-/etc/leaderrun/leaderrun.env\nEnvironmentFile=/etc/leaderrun/%i.env",
		"ExecStart=/usr/bin/leaderrun --key %i -- $LEADERRUN_COMMAND",
		"RestartPreventExitStatus=125", "SuccessExitStatus=143"} {
		if !strings.Contains(text, want) {
			t.Errorf("unit lacks %q", want)
		}
	}
	// The settings files the package installs, where the unit reads them.
	dir := t.TempDir()
	etc := filepath.Join(dir, "etc")
	if err := os.Mkdir(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	for src, dst := range map[string]string{"packaging/systemd/leaderrun.env": "leaderrun.env", "packaging/systemd/example.env": "billing.env"} {
		b, err := os.ReadFile(repoFile(t, src))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(etc, dst), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	text = strings.ReplaceAll(text, "/etc/leaderrun/", etc+"/")
	text = strings.ReplaceAll(text, "/usr/bin/leaderrun", binary)
	for _, name := range []string{"leaderrun@.service", "leaderrun@billing.service"} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(analyze, "verify", "--man=no", path)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil || stderr.Len() > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", name, err, stderr.String())
		}
	}
}

// packagedExample is the commented example of an instance's KEY.env. It
// is outside /usr/share/doc, which minimal images drop (Debian policy
// 12.3: nothing may rely on it).
const packagedExample = "/usr/share/leaderrun/example.env"

// lintianClean runs lintian on the .deb with every severity shown, down to
// pedantic, and fails on each tag it reports: the package's own overrides
// (packaging/lintian-overrides, each with its reason) are the only
// exceptions, and one that no longer matches is itself reported
// (unused-override, mismatched-override).
func lintianClean(t *testing.T, deb string) {
	t.Helper()
	lintian, err := exec.LookPath("lintian")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("lintian not installed (scripts/install-deps.sh installs it)")
		}
		t.Log("lintian not installed: the .deb is not linted (apt-get install lintian)")
		return
	}
	start := time.Now()
	cmd := exec.Command(lintian, "--fail-on", "error,warning,info,pedantic", "--display-level", ">=pedantic",
		"--tag-display-limit", "0", "--no-cfg", deb)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var tags []string
	chance := 0
	for _, tag := range regexp.MustCompile(`(?m)^[EWIPX]: .*$`).FindAllString(stdout.String(), -1) {
		// The override of spelling errors lintian finds in chance byte
		// runs of the binary (packaging/lintian-overrides) is unused by
		// a build that happens to make none.
		if strings.HasPrefix(tag, "I: leaderrun: unused-override spelling-error-in-binary ") {
			chance++
			continue
		}
		tags = append(tags, tag)
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) && chance > 0 && len(tags) == 0 {
		err = nil // failed on that tag alone
	}
	if err != nil || len(tags) > 0 {
		t.Errorf("lintian %s: %v\n%s\n%s", filepath.Base(deb), err, strings.Join(tags, "\n"), stderr.String())
	}
	t.Logf("lintian: %d tags in %v", len(tags), time.Since(start).Round(time.Millisecond))
}

// rpmlintClean runs rpmlint on the .rpm with the package's configuration
// (packaging/rpmlint.toml: the rpm distributions' conventions rpmlint's
// defaults do not know, and each filtered finding with its reason) and
// fails on every error or warning it still prints.
func rpmlintClean(t *testing.T, rpm string) {
	t.Helper()
	rpmlint, err := exec.LookPath("rpmlint")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("rpmlint not installed (scripts/install-deps.sh installs it)")
		}
		t.Log("rpmlint not installed: the .rpm is not linted (apt-get install rpmlint)")
		return
	}
	// rpmlint unpacks the package with `rpm2cpio | cpio -id`, and nfpm's
	// payload names its files by absolute paths, which GNU cpio writes
	// where they say: into this machine's /usr and /etc. A cpio first in
	// PATH makes them relative to rpmlint's scratch directory, and leaves
	// a mark so the test knows it was the one that ran.
	realCpio, err := exec.LookPath("cpio")
	if err != nil {
		t.Fatalf("rpmlint needs cpio: %v", err)
	}
	wrap := t.TempDir()
	mark := filepath.Join(wrap, "used")
	script := "#!/bin/sh\n: > '" + mark + "'\nexec '" + realCpio + "' --no-absolute-filenames \"$@\"\n"
	if err := os.WriteFile(filepath.Join(wrap, "cpio"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(rpmlint, "--config", repoFile(t, "packaging/rpmlint.toml"), rpm)
	cmd.Env = append(os.Environ(), "LANG=C.UTF-8", "PATH="+wrap+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if _, serr := os.Stat(mark); serr != nil {
		t.Fatalf("rpmlint did not unpack the package through the wrapped cpio: %v\n%s", serr, out)
	}
	findings := regexp.MustCompile(`(?m)^\S+: [EW]: .*$`).FindAllString(string(out), -1)
	if err != nil || len(findings) > 0 {
		t.Errorf("rpmlint %s: %v\n%s", filepath.Base(rpm), err, out)
	}
	t.Logf("rpmlint: %d findings", len(findings))
}

// TestPackages checks the .deb and .rpm that `make packages` built into
// $LEADERRUN_PACKAGE_DIR (make test and make package-test set it), and
// installs the .deb on this machine when run as root and no leaderrun
// package is installed yet; it is purged again afterwards.
func TestPackages(t *testing.T) {
	dist := os.Getenv("LEADERRUN_PACKAGE_DIR")
	if dist == "" {
		t.Skip("LEADERRUN_PACKAGE_DIR is not set: run `make package-test`")
	}
	find := func(pattern string) string {
		t.Helper()
		m, _ := filepath.Glob(filepath.Join(dist, pattern))
		if len(m) != 1 {
			t.Fatalf("want exactly one %s in %s, found %v", pattern, dist, m)
		}
		return m[0]
	}
	deb, rpm := find("leaderrun_*.deb"), find("leaderrun-*.rpm")
	for _, p := range []string{deb, rpm} {
		if info, err := os.Stat(p); err == nil {
			t.Logf("%s: %.1f MB", filepath.Base(p), float64(info.Size())/1e6)
		}
	}

	want := []string{
		"/usr/bin/leaderrun",
		"/usr/bin/leaderrun-guard",
		"/etc/leaderrun/leaderrun.env",
		packagedExample,
		"/usr/share/man/man1/leaderrun.1.gz",
		"/usr/share/man/man1/leaderrun-guard.1.gz",
		"/usr/share/bash-completion/completions/leaderrun",
		"/usr/lib/tmpfiles.d/leaderrun.conf",
	}
	out, err := exec.Command("dpkg-deb", "-c", deb).Output()
	if err != nil {
		t.Fatalf("dpkg-deb -c: %v", err)
	}
	for _, f := range append(want, "/lib/systemd/system/leaderrun@.service", "/usr/share/zsh/vendor-completions/_leaderrun",
		"/usr/share/doc/leaderrun/copyright", "/usr/share/doc/leaderrun/changelog.gz",
		"/usr/share/doc/leaderrun/README.md.gz", "/usr/share/doc/leaderrun/DESIGN.md.gz", "/usr/share/doc/leaderrun/DESIGN-SAFETY.md.gz", "/var/lib/leaderrun/",
		"/usr/share/doc/leaderrun/docs/REFERENCE.md.gz", "/usr/share/doc/leaderrun/docs/OPERATING.md.gz",
		"/usr/share/doc/leaderrun/docs/BACKENDS.md.gz", "/usr/share/doc/leaderrun/docs/SAFETY.md.gz",
		"/usr/share/doc/leaderrun/docs/FENCING.md.gz") {
		if !strings.Contains(string(out), "."+f+"\n") {
			t.Errorf(".deb lacks %s:\n%s", f, out)
		}
	}
	// Debian policy 12.3: nothing may rely on /usr/share/doc (minimal
	// images drop it), and what is there is compressed, apart from the
	// copyright file.
	for _, m := range regexp.MustCompile(`(?m)^-\S+ \S+ +\d+ \S+ \S+ \./usr/share/doc/leaderrun/(\S+)$`).FindAllStringSubmatch(string(out), -1) {
		if m[1] != "copyright" && !strings.HasSuffix(m[1], ".gz") {
			t.Errorf(".deb ships /usr/share/doc/leaderrun/%s uncompressed", m[1])
		}
	}
	if unit, err := os.ReadFile(repoFile(t, "packaging/systemd/leaderrun@.service")); err != nil || bytes.Contains(unit, []byte("/usr/share/doc/")) {
		t.Errorf("leaderrun@.service sends the operator to /usr/share/doc (%v)", err)
	}
	lintianClean(t, deb)
	rpmlintClean(t, rpm)
	if strings.Contains(string(out), "./etc/leaderrun/example.env") {
		t.Errorf(".deb installs example.env into /etc/leaderrun, where it is a startable instance")
	}
	if !regexp.MustCompile(`(?m)^-rw------- root/root .* \./etc/leaderrun/leaderrun\.env$`).Match(out) {
		t.Errorf(".deb leaderrun.env is not root-owned 0600:\n%s", out)
	}
	if !regexp.MustCompile(`(?m)^-rwxr-xr-x root/root .* \./usr/bin/leaderrun$`).Match(out) {
		t.Errorf(".deb binary is not root-owned 0755:\n%s", out)
	}
	conf, err := exec.Command("dpkg-deb", "-I", deb, "conffiles").Output()
	if err != nil || !strings.Contains(string(conf), "/etc/leaderrun/leaderrun.env") {
		t.Errorf(".deb conffiles %q (%v): leaderrun.env must be a conffile", conf, err)
	}

	if rpmCmd, err := exec.LookPath("rpm"); err == nil {
		out, err := exec.Command(rpmCmd, "-qlp", rpm).Output()
		if err != nil {
			t.Fatalf("rpm -qlp: %v", err)
		}
		for _, f := range append(want, "/usr/lib/systemd/system/leaderrun@.service", "/usr/share/zsh/site-functions/_leaderrun",
			"/usr/share/licenses/leaderrun/LICENSE", "/usr/share/doc/leaderrun/README.md", "/var/lib/leaderrun",
			"/usr/share/doc/leaderrun/docs/REFERENCE.md", "/usr/share/doc/leaderrun/docs/SAFETY.md") {
			if !strings.Contains(string(out), f+"\n") {
				t.Errorf(".rpm lacks %s:\n%s", f, out)
			}
		}
		cfg, _ := exec.Command(rpmCmd, "-qcp", rpm).Output()
		if !strings.Contains(string(cfg), "/etc/leaderrun/leaderrun.env") {
			t.Errorf(".rpm config files %q: leaderrun.env must be %%config(noreplace)", cfg)
		}
		if lic, err := exec.Command(rpmCmd, "-qp", "--queryformat", "%{LICENSE}", rpm).Output(); err != nil || string(lic) != "Apache-2.0" {
			t.Errorf(".rpm License: %q %v, want Apache-2.0", lic, err)
		}
	} else {
		b, err := os.ReadFile(rpm)
		if err != nil || len(b) < 4 || !bytes.Equal(b[:4], []byte{0xed, 0xab, 0xee, 0xdb}) {
			t.Fatalf("%s is not an RPM file", rpm)
		}
		t.Log("rpm not installed: only the .rpm's lead was checked (apt-get install rpm for its file list)")
	}

	if os.Geteuid() != 0 {
		t.Log("not root: the .deb is not installed")
		return
	}
	// Two test runs on one machine take turns: install, check, purge.
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "leaderrun-package-test.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if exec.Command("dpkg", "-s", "leaderrun").Run() == nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("a leaderrun package is already installed on this CI machine: the package test needs it absent (dpkg --purge leaderrun)")
		}
		t.Skip("a leaderrun package is already installed here: not replacing it")
	}
	// Root's epoch copies (tests of this run leave some) are kept aside
	// while the package owns the directory, since the purge deletes it.
	keepStateAside(t, "/var/lib/leaderrun")
	if out, err := exec.Command("dpkg", "-i", deb).CombinedOutput(); err != nil {
		t.Fatalf("dpkg -i: %v\n%s", err, out)
	}
	defer func() { // before the lock is let go
		if out, err := exec.Command("dpkg", "--purge", "leaderrun").CombinedOutput(); err != nil {
			t.Errorf("dpkg --purge: %v\n%s", err, out)
		}
		// The state directory's own test file, not the directory: a
		// leaderrun of another test package may write its epoch copy
		// there again meanwhile.
		for _, f := range []string{"/usr/bin/leaderrun", "/etc/leaderrun/leaderrun.env", "/var/lib/leaderrun/pkgtest"} {
			if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s still there after purge: %v", f, err)
			}
		}
	}()
	ver, err := exec.Command("/usr/bin/leaderrun", "version").Output()
	if err != nil || !strings.HasPrefix(string(ver), "leaderrun ") {
		t.Fatalf("installed leaderrun version: %q %v", ver, err)
	}
	t.Logf("installed: %s", strings.TrimSpace(string(ver)))
	// A build between releases is versioned 0.0.0~git<time>.<commit>: the
	// binary says which commit it is too.
	if m := regexp.MustCompile(`~git[0-9]{14}\.([0-9a-f]{7,})_`).FindStringSubmatch(filepath.Base(deb)); m != nil && !strings.Contains(string(ver), "commit "+m[1]) {
		t.Errorf("installed leaderrun version %q does not name commit %s, the package's", ver, m[1])
	}
	for _, f := range append(want, "/lib/systemd/system/leaderrun@.service") {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("after dpkg -i: %v", err)
		}
	}
	if info, err := os.Stat("/etc/leaderrun/leaderrun.env"); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("installed leaderrun.env: %v %v, want mode 0600", info, err)
	}
	if info, err := os.Stat("/var/lib/leaderrun"); err != nil || info.Mode().Perm() != 0o700 {
		t.Errorf("installed /var/lib/leaderrun: %v %v, want mode 0700 (as leaderrun keeps it)", info, err)
	}
	if owner, err := exec.Command("dpkg-query", "-S", "/var/lib/leaderrun").CombinedOutput(); err != nil || !strings.HasPrefix(string(owner), "leaderrun: ") {
		t.Errorf("dpkg-query -S /var/lib/leaderrun: %q %v, want the package to own it", owner, err)
	}
	// Root's epoch counters, which only a purge deletes.
	if err := os.WriteFile("/var/lib/leaderrun/pkgtest", []byte("1\n"), 0o600); err != nil {
		t.Error(err)
	}

	// An instance configured as the README says: the shared file names the
	// backend, KEY.env the command. Without systemd as PID 1 here, the
	// instance is started as its unit would start it; `status --unit` reads
	// the same two files.
	key := fmt.Sprintf("pkgtest-%d", os.Getpid())
	lockDir := t.TempDir()
	shared, err := os.ReadFile("/etc/leaderrun/leaderrun.env")
	if err != nil {
		t.Fatal(err)
	}
	shared = append(shared, []byte("LEADERRUN_BACKEND=local\nLEADERRUN_LOCK_DIR="+lockDir+"\n")...)
	if err := os.WriteFile("/etc/leaderrun/leaderrun.env", shared, 0o600); err != nil {
		t.Fatal(err)
	}
	instance := "/etc/leaderrun/" + key + ".env"
	if err := os.WriteFile(instance, []byte("LEADERRUN_COMMAND=/bin/sleep 1000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(instance)
	run := exec.Command("/usr/bin/leaderrun", "--env-file", "/etc/leaderrun/leaderrun.env", "--env-file", instance,
		"--key", key, "--", "/bin/sleep", "1000")
	run.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = run.Process.Signal(syscall.SIGTERM); _ = run.Wait() }()
	leads := regexp.MustCompile(`(?m)^pid\s+` + strconv.Itoa(run.Process.Pid) + `$`)
	var st []byte
	waitFor(t, 10*time.Second, "status --unit to show the instance leading", func() bool {
		st, err = exec.Command("/usr/bin/leaderrun", "status", "--unit", key).CombinedOutput()
		return err == nil && leads.Match(st) && regexp.MustCompile(`(?m)^backend\s+local$`).Match(st)
	})

}

// backendNames are the backends `leaderrun --backend`'s error names, in
// its order, space-separated: what completion should offer.
func backendNames(t *testing.T) string {
	t.Helper()
	_, _, errOut, _ := runOnce(t, nil, "--backend", "nosuch", "--key", "k", "--", "true")
	m := regexp.MustCompile(`--backend must be (.*), got "nosuch"`).FindStringSubmatch(errOut)
	if m == nil {
		t.Fatalf("--backend's error names no backends: %q", errOut)
	}
	return strings.NewReplacer(", ", " ", " or ", " ").Replace(m[1])
}

// keepStateAside moves dir, when it holds anything, to a name beside it
// and moves its entries back once the test is done (after the purge
// registered later), keeping any entry written there meanwhile.
func keepStateAside(t *testing.T, dir string) {
	t.Helper()
	if ents, _ := os.ReadDir(dir); len(ents) == 0 {
		return
	}
	saved := fmt.Sprintf("%s.pkgtest-%d", dir, os.Getpid())
	if err := os.Rename(dir, saved); err != nil {
		t.Fatalf("keeping %s aside: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			t.Errorf("restoring %s: %v", dir, err)
			return
		}
		ents, err := os.ReadDir(saved)
		if err != nil {
			t.Errorf("restoring %s: %v", dir, err)
			return
		}
		for _, e := range ents {
			to := filepath.Join(dir, e.Name())
			if _, err := os.Lstat(to); err == nil {
				continue // written meanwhile: the newer one stays
			}
			if err := os.Rename(filepath.Join(saved, e.Name()), to); err != nil {
				t.Errorf("restoring %s: %v", to, err)
			}
		}
		_ = os.RemoveAll(saved)
	})
}
