package chaos

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/fence"
)

// world is one backend under chaos: a 3-server cluster, three leaderrun
// "hosts" campaigning for one key, each behind its own proxies, and the
// fenced resource their children write to.
type world struct {
	t     *testing.T
	bins  Binaries // this world's own copies
	cl    Cluster
	tm    Timing
	dir   string
	fence *fence.Server
	check *fence.Checker
	fed   int // writes already fed to check
	hosts []*host
	// prof is how the hosts run now (setProfile).
	prof  profile
	rng   *rand.Rand
	stats map[string]*faultStats
	// ctl counts the control commands' outcomes (control_test.go).
	ctl map[string]*ctlCount
}

// profile is how every host of a world runs during a fault: how leaderrun
// contains its job, what the job is, and its timing.
type profile struct {
	// contain is the hosts' --contain mode: cgroup, group or auto.
	contain string
	// job is the hosts' command: "" the plain writer; jobLinger one that
	// takes its whole kill grace to stop; jobEscape a writer
	// that escapes its process group (FENCE_ESCAPE=1: the process
	// leaderrun starts stays as the job's main process, the writer is a
	// daemon beside it); jobStorm a writer beside chains of relays that
	// keep forking (FENCE_STORM).
	job string
	// guardFirst gives the hosts a kill grace shorter than the renew
	// interval and --restart on-failure, for the guard-fires-first fault:
	// a supervisor that missed its guard's kill would start the child
	// again.
	guardFirst bool
}

// The hosts' jobs (profile.job).
const (
	jobEscape = "escape"
	jobStorm  = "storm"
	// jobLinger is a writer that ignores SIGTERM and writes on until the
	// kill grace ends in SIGKILL (FENCE_LINGER=1).
	jobLinger = "linger"
	// jobPing is a writer that pings WATCHDOG=1 after each write
	// (FENCE_PING=1), its hosts run with --job-watchdog zombieWatchdog.
	jobPing = "ping"
)

// zombieWatchdog is the hosts' --job-watchdog for the zombie-job fault.
const zombieWatchdog = time.Second

// stormChains is how many relay chains a fork-storm job keeps going.
const stormChains = 2

// String names the profile for logs.
func (p profile) String() string {
	s := "--contain " + p.contain
	if p.job != "" {
		s += ", " + p.job + " job"
	}
	if p.guardFirst {
		s += ", guard-first timing"
	}
	return s
}

// timing is the hosts' timeline under the profile: the backend's, with a
// kill grace below the renew interval for guardFirst (half of it, and the
// margin as it was; both only shrink, so the timing rule still holds).
func (p profile) timing(tm Timing) Timing {
	if p.guardFirst && tm.KillGrace >= tm.RenewInterval {
		tm.KillGrace = tm.RenewInterval / 2
	}
	return tm
}

// host is one leaderrun "host": its proxies and its current leaderrun.
type host struct {
	id      string
	n       int
	link    *Link
	proc    *Proc
	started time.Time // when proc was started
	frozen  bool      // SIGSTOPped by a fault
	cut     bool      // partitioned by a fault
	// priority is its --priority, with -chaos.control (priorityArgs).
	priority int
}

// faultStats are the results of one fault type.
type faultStats struct {
	runs          int
	overlaps      int // accepted writes of two children interleaved
	twoAlive      int // runs in which two children ran at once
	stale         int // writes with an outdated epoch (all should be rejected)
	staleAccepted int
	regressions   int
	gaps          Durations // longest time without an accepted write, per run
	stopAfter     Durations // fault → old child's death, where the fault cuts the lease
	kept          int       // runs after which the same child still led
	failover      Durations // fault → start of the next leader's child, where leadership moved
	leftovers     int       // runs after which a process of an earlier job ran on
	resumeLag     Durations // guard-fires-first: the guard's kill → the supervisor's SIGCONT
	inDeadline    int       // guard-fires-first: runs whose supervisor resumed before its own deadline
	failed        int       // runs with a violated check
}

// Polling and waiting bounds.
const (
	pollEvery = 20 * time.Millisecond
	// fresh is how recent the last accepted write must be for its writer
	// to count as the running leader's child; it writes every 10ms.
	fresh = 250 * time.Millisecond
	// strayTimeout bounds the wait for processes to go after a run: a
	// guard of a killed leaderrun may wait up to 5s for the group and 5s
	// for the release.
	strayTimeout = 20 * time.Second
)

// key is the leadership key every host campaigns for.
const key = "chaos"

func newWorld(t *testing.T, cl Cluster, seed uint64) *world {
	t.Helper()
	f, err := fence.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	own, err := bins.CopyTo(dir)
	if err != nil {
		t.Fatal(err)
	}
	w := &world{
		t: t, bins: own, cl: cl, tm: cl.Timing(), dir: dir, fence: f, check: fence.NewChecker(),
		prof:  profile{contain: "auto"},
		rng:   rand.New(rand.NewPCG(seed, uint64(len(cl.Name())))),
		stats: map[string]*faultStats{}, ctl: map[string]*ctlCount{},
	}
	for i := 0; i < 3; i++ {
		l, err := NewLink(cl, i)
		if err != nil {
			t.Fatal(err)
		}
		w.hosts = append(w.hosts, &host{id: fmt.Sprintf("%s-h%d", cl.Name(), i), n: i, link: l})
	}
	if controlling() {
		for _, h := range w.hosts {
			h.priority = w.rng.IntN(3)
		}
	}
	// Cleanups run last-in first-out: the processes go first, then the
	// proxies and the fence they talk to.
	t.Cleanup(func() {
		f.Close()
		for _, h := range w.hosts {
			h.link.Close()
		}
		if *flagLogs != "" {
			w.keepLogs(*flagLogs)
		}
	})
	t.Cleanup(func() {
		for _, h := range w.hosts {
			if h.proc != nil {
				_ = syscall.Kill(-h.proc.Pid(), syscall.SIGCONT)
				h.proc.Kill()
			}
		}
		killStrays(t, w.bins)
	})
	return w
}

// killStrays SIGKILLs whatever the suite's binaries still run, as a last
// resort after a failure; a passing run leaves nothing (checked elsewhere).
func killStrays(t *testing.T, bins Binaries) {
	scan := func() []Process { return Scan(bins.Leaderrun, bins.Writer, bins.Guard) }
	for _, p := range scan() {
		t.Logf("killing leftover %v", p)
	}
	if !killUntilGone(scan) {
		t.Logf("still running after 5s of killing: %v", scan())
	}
}

// keepLogs copies the hosts' logs into dir, before the test's temporary
// folder goes.
func (w *world) keepLogs(dir string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		w.t.Logf("keep logs: %v", err)
		return
	}
	for _, h := range w.hosts {
		b, err := os.ReadFile(filepath.Join(w.dir, h.id+".log"))
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, h.id+".log"), b, 0o644)
		}
		if err != nil {
			w.t.Logf("keep logs: %v", err)
		}
	}
}

// start runs a new leaderrun on h.
func (w *world) start(h *host) {
	w.t.Helper()
	args := append(w.cl.LeaderrunArgs(h.link.Addrs()), w.prof.timing(w.tm).Args()...)
	args = append(args, "--contain", w.prof.contain)
	if w.prof.guardFirst {
		args = append(args, "--restart", "on-failure")
	}
	args = append(args, priorityArgs(h)...)
	if w.prof.job == jobPing {
		args = append(args, "--job-watchdog", zombieWatchdog.String())
	}
	args = append(args, "--key", key, "--id", h.id, "--log-level", "debug", "--", w.bins.Writer)
	env := append(w.fence.Env(h.id), HostEnv(w.cl)...)
	switch w.prof.job {
	case jobEscape:
		env = append(env, "FENCE_ESCAPE=1")
	case jobStorm:
		env = append(env, "FENCE_STORM="+strconv.Itoa(stormChains))
	case jobLinger:
		env = append(env, "FENCE_LINGER=1")
	case jobPing:
		env = append(env, "FENCE_PING=1")
	}
	p, err := Start(ProcSpec{
		Name: h.id, Path: w.bins.Leaderrun, Args: args, Env: env,
		LogPath: filepath.Join(w.dir, h.id+".log"),
	})
	if err != nil {
		w.t.Fatal(err)
	}
	h.proc, h.started = p, time.Now()
}

// ensureHosts restarts every host whose leaderrun exited, after checking
// that it exited the way a fault allows: 123 (leadership lost) or 137 (it,
// or its child, was killed with SIGKILL).
func (w *world) ensureHosts() {
	w.t.Helper()
	restartExited(w.t, w.hosts, w.start)
}

// restartExited starts again every host of hosts whose leaderrun exited,
// failing t when it exited other than with 123 or 137.
func restartExited(t *testing.T, hosts []*host, start func(*host)) {
	t.Helper()
	for _, h := range hosts {
		if h.proc != nil && !h.proc.Exited() {
			continue
		}
		if h.proc != nil {
			if c := h.proc.Code(); c != 123 && c != 137 {
				t.Errorf("%s: leaderrun exited %d, want 123 or 137\n%s", h.id, c, h.proc.Output(8<<10))
			}
		}
		start(h)
	}
}

// setProfile makes the hosts run as p: if that differs from how they run
// now, it stops every host gracefully, checks that nothing is left, and
// lets ensureHosts start them anew.
func (w *world) setProfile(p profile) {
	w.t.Helper()
	if w.prof == p {
		return
	}
	w.stopHosts()
	w.waitNoneLeft()
	for _, h := range w.hosts {
		h.proc = nil
	}
	w.prof = p
}

// host returns the host named id, or nil.
func (w *world) host(id string) *host {
	for _, h := range w.hosts {
		if h.id == id {
			return h
		}
	}
	return nil
}

// leader returns the host whose child is writing now and that child, when
// the picture is clear: the last accepted write is fresh, its writer is
// still connected and is the child of that host's live, unfrozen leaderrun.
func (w *world) leader() (*host, fence.Instance, bool) {
	wr, in, ok := w.fence.LastAccepted()
	if !ok || fence.Now().Sub(wr.At) > fresh || in.Closed != 0 {
		return nil, in, false
	}
	h := w.host(in.Writer)
	if h == nil || h.proc == nil || h.proc.Exited() || h.frozen || h.cut {
		return nil, in, false
	}
	if st, ok := Stat(in.Pid); !ok || st.PPid != h.proc.Pid() {
		return nil, in, false
	}
	return h, in, true
}

// waitStable waits until one leader's child has written steadily for settle
// since since (or since it started, if later).
func (w *world) waitStable(since fence.Mono, settle, timeout time.Duration) (*host, fence.Instance) {
	w.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if h, in, ok := w.leader(); ok {
			if fence.Now().Sub(max(since, in.Hello)) >= settle {
				return h, in
			}
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("no stable leader within %v\n%s", timeout, w.describe())
		}
		time.Sleep(pollEvery)
	}
}

// describe is the state of every host, for failure messages.
func (w *world) describe() string {
	var b strings.Builder
	for _, h := range w.hosts {
		fmt.Fprintf(&b, "---- %s (%s) ----\n", h.id, h.link)
		if h.proc != nil {
			b.WriteString(h.proc.Output(6 << 10))
		}
	}
	ins := w.fence.Instances()
	if len(ins) > 4 {
		ins = ins[len(ins)-4:]
	}
	for _, in := range ins {
		fmt.Fprintf(&b, "writer %s epoch %d accepted %d rejected %d closed %v\n", in.Name(), in.Epoch, in.Accepted, in.Rejected, in.Closed != 0)
	}
	return b.String()
}

// waitTakeover holds a fault until another host's child has written after
// at, at least least has passed and, with oldDead, the old child old is
// dead; it reports whether that happened within timeout.
func (w *world) waitTakeover(old fence.Instance, at fence.Mono, least, timeout time.Duration, oldDead bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		wr, in, ok := w.fence.LastAccepted()
		took := ok && in.Writer != old.Writer && wr.At > at
		if took && fence.Now().Sub(at) >= least && (!oldDead || !Alive(old.Pid)) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pollEvery)
	}
}

// waitDead waits until pid is gone or timeout passes.
func waitDead(pid int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for Alive(pid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pollEvery)
	}
	return true
}

// guardOf is the dead-man guard of h's leaderrun, 0 if none.
func (w *world) guardOf(h *host) int {
	for _, p := range Scan(w.bins.Leaderrun, w.bins.Guard) {
		if p.IsGuard() && p.PPid == h.proc.Pid() {
			return p.Pid
		}
	}
	return 0
}

// strays lists processes of the suite's binaries that should not exist:
// anything but the hosts' leaderruns, the leader's guard and the leader's
// job. The job is told by leaderrun's marker (contain.EnvMarker) in each
// process's environment, which every process of the job inherits: the
// leader's writer, and with an escaping writer the job's main process, with
// a fork storm its relays. A process of an earlier job (an escaped writer,
// a relay) that outlived its leadership is a stray like any other.
func (w *world) strays() []Process {
	lh, in, ok := w.leader()
	mark := ""
	if ok {
		mark = JobMarker(in.Pid)
	}
	var bad []Process
	for _, p := range Scan(w.bins.Leaderrun, w.bins.Writer, w.bins.Guard) {
		switch {
		case p.Exe == w.bins.Writer:
			if ok && p.Pid == in.Pid {
				continue
			}
			if m, alive := markerOf(p.Pid); !alive || ok && mark != "" && m == mark {
				continue // gone since the scan, or the leader's job
			}
		case p.IsGuard():
			if ok && p.PPid == lh.proc.Pid() {
				continue
			}
		default:
			if w.isHost(p.Pid) {
				continue
			}
		}
		bad = append(bad, p)
	}
	return bad
}

// markerOf is pid's job marker; alive is false when pid has none and is
// gone (a relay of a fork storm lives a few milliseconds).
func markerOf(pid int) (mark string, alive bool) {
	if m := JobMarker(pid); m != "" {
		return m, true
	}
	return "", Alive(pid)
}

func (w *world) isHost(pid int) bool {
	for _, h := range w.hosts {
		if h.proc != nil && !h.proc.Exited() && h.proc.Pid() == pid {
			return true
		}
	}
	return false
}

// checkStrays waits for leftovers to go; it reports whether none was left.
func (w *world) checkStrays() bool {
	w.t.Helper()
	deadline := time.Now().Add(strayTimeout)
	for {
		bad := w.strays()
		if len(bad) == 0 {
			return true
		}
		if time.Now().After(deadline) {
			var s []string
			for _, p := range bad {
				s = append(s, p.String())
			}
			w.t.Errorf("processes left behind %v after the run:\n%s\n%s", strayTimeout, strings.Join(s, "\n"), w.describe())
			killUntilGone(w.strays)
			return false
		}
		time.Sleep(pollEvery)
	}
}

// killUntilGone SIGKILLs what list returns until it returns nothing, for
// at most 5s: a fork storm's relay chain moves on between two scans, so one
// round of kills is not enough. It reports whether nothing was left.
func killUntilGone(list func() []Process) bool {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		left := list()
		if len(left) == 0 {
			return true
		}
		for _, p := range left {
			_ = syscall.Kill(p.Pid, syscall.SIGCONT)
			_ = syscall.Kill(p.Pid, syscall.SIGKILL)
		}
	}
	return len(list()) == 0
}

// shutdown stops every host gracefully and checks that nothing of the
// suite is left running.
func (w *world) shutdown() {
	w.t.Helper()
	w.stopHosts()
	w.waitNoneLeft()
}

// stopHosts sends SIGTERM to every host's leaderrun and checks how each
// exited.
func (w *world) stopHosts() {
	w.t.Helper()
	for _, h := range w.hosts {
		if h.proc != nil {
			_ = h.proc.Signal(syscall.SIGTERM)
		}
	}
	for _, h := range w.hosts {
		if h.proc == nil {
			continue
		}
		code, ok := h.proc.Wait(30 * time.Second)
		switch {
		case !ok:
			w.t.Errorf("%s: leaderrun still running 30s after SIGTERM", h.id)
		case code != 143 && code != 123 && code != 137 && (w.prof.job != jobEscape || code != 1):
			// 143: the child's or the campaign's SIGTERM; 123 or 137 if it
			// had just lost or been killed by the last fault. An escaping
			// job's launcher exits 1 when the SIGTERM reached its escaped
			// writer first (it returns once the writer is gone), and
			// leaderrun passes its job's status on.
			w.t.Errorf("%s: leaderrun exited %d after SIGTERM\n%s", h.id, code, h.proc.Output(8<<10))
		}
	}
}

// waitNoneLeft checks that nothing of the suite runs once every leaderrun
// has exited.
func (w *world) waitNoneLeft() {
	w.t.Helper()
	deadline := time.Now().Add(strayTimeout)
	for {
		left := Scan(w.bins.Leaderrun, w.bins.Writer, w.bins.Guard)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			w.t.Errorf("left running after every leaderrun exited: %v", left)
			killUntilGone(func() []Process { return Scan(w.bins.Leaderrun, w.bins.Writer, w.bins.Guard) })
			return
		}
		time.Sleep(pollEvery)
	}
}

// nextChild is when the first child of a later leadership than old's
// started after the fault struck at at (ok false if none did).
func (w *world) nextChild(old fence.Instance, at fence.Mono) (fence.Mono, bool) {
	var first fence.Mono
	for _, in := range w.fence.Instances() {
		if in.Epoch > old.Epoch && in.Started > at && (first == 0 || in.Started < first) {
			first = in.Started
		}
	}
	return first, first != 0
}
