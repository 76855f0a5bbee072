package chaos

import (
	"bytes"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/leaderrun/leaderrun/tests/fence"
)

// fault is one kind of trouble the suite injects while a leader's child
// writes to the fence.
type fault struct {
	name string
	// doc says what the fault does, for the report.
	doc string
	// twoAlive is set when the old child may legitimately run again next
	// to the new one: a whole frozen host wakes up. The fence must then
	// reject every write it makes.
	twoAlive bool
	// backends, when set, lists the backends the fault applies to.
	backends []string
	// remote is set for faults that need servers to fault or a network to
	// cut, and for freeze-host (a whole frozen host keeps the one machine's
	// lock): not injected on the local backend.
	remote bool
	// job is the hosts' job during the fault (profile.job): "" the plain
	// writer, jobEscape or jobStorm.
	job string
	// guardFirst runs the fault with the guard-first timing
	// (profile.guardFirst).
	guardFirst bool
	// control marks the operator's control faults (control_test.go): a
	// long run takes them only with -chaos.control.
	control bool
	// inject causes the fault on leader h, whose child is in, holds it as
	// long as the fault lasts, heals it and returns what it measured.
	inject func(w *world, h *host, in fence.Instance) outcome
}

// outcome is what an injection measured.
type outcome struct {
	at fence.Mono // when the fault struck
	// stopAfter is the time from the fault to the old child's death, for
	// faults that take the lease away from a live leaderrun; it must stay
	// below the TTL.
	stopAfter time.Duration
	stopped   bool
	// resumeLag, for guard-fires-first, is the time from the job's death
	// (the guard's kill) to the supervisor's SIGCONT; the supervisor woke
	// before its own deadline if it is below the safety margin.
	resumeLag time.Duration
	resumed   bool
	// how names the way a fault that picks one of several struck.
	how string
}

// faults are every fault type, in report order.
var faults = []fault{
	{name: "kill-leader", doc: "`kill -9` of the leader's leaderrun", inject: killLeader},
	{name: "kill-child", doc: "`kill -9` of the leader's child", inject: killChild},
	{name: "freeze-leaderrun", doc: "SIGSTOP of the leader's leaderrun until another host leads (at least the TTL), then SIGCONT", inject: freezeLeaderrun},
	{name: "freeze-host", doc: "SIGSTOP of the leader's leaderrun, guard and child (a paused VM) until another host leads, then SIGCONT, child first (not local)", twoAlive: true, remote: true, inject: freezeHost},
	{name: "kill-server", doc: "`kill -9` of one backend server (random, the Raft leader included), restarted after TTL + 1s", remote: true, inject: killServer},
	{name: "lose-quorum", doc: "`kill -9` of two of the three servers until the leader's child is stopped (at least the TTL), then restart (not Kubernetes: one API server)", backends: []string{"etcd", "consul"}, remote: true, inject: loseQuorum},
	{name: "partition", doc: "the leader's proxies cut (refuse or blackhole, at random) until another host leads, then healed", remote: true, inject: partition},
	{name: "silent-server", doc: "the one server carrying the leader's traffic blackholed from the leader's host for TTL + 2s, the others reachable", remote: true, inject: silentServer},
	{name: "restart-backend", doc: "`kill -9` of every server, then restart of all", remote: true, inject: restartBackend},
	{name: "escape", doc: "the leader's writer is a daemon (setsid and a double fork, its parent gone) outside the job's process group; then `kill -9` of the leader's leaderrun or a partition (at random; local: kill)", job: jobEscape, inject: escape},
	{name: "guard-fires-first", doc: "hosts with a kill grace below the renew interval and `--restart on-failure`; SIGSTOP of the leader's leaderrun alone (not its guard, not its job) until its guard has killed the job at the kill point, then SIGCONT at once, before the supervisor's own deadline where it can: it must end the term, exit 123, and start nothing", guardFirst: true, inject: guardFiresFirst},
	{name: "both-killed", doc: "the leader's writer is a daemon, as for escape; `kill -9` of the leader's leaderrun and its guard at once, then the same host's leaderrun started again", job: jobEscape, inject: bothKilled},
	{name: "hand-edit", doc: "an operator's hand edit of the leader's record on the backend, one of those it has (delete it, empty it, lower its TTL, set its epoch down), while the leader's job ignores SIGTERM and takes its whole kill grace to stop; held until another host leads or 2 x TTL + 5s passed", job: jobLinger, inject: handEdit},
	{name: "zombie-job", doc: "the leader's writer, which pings WATCHDOG=1 after each write (hosts with `--job-watchdog 1s`), is SIGSTOPped: it hangs; its leaderrun must stop it and hand over, and another host's child write within the watchdog + kill grace + a takeover", backends: []string{"local", "etcd", "consul"}, job: jobPing, inject: zombieJob},
	{name: "fork-storm", doc: "the job keeps forking: chains of relays that each live a few ms, start their successor in a session of their own and exit; then `kill -9` of the leader's leaderrun, `kill -9` of its writer, a frozen leaderrun or a partition (at random; local: no partition)", job: jobStorm, inject: forkStorm},
}

// faultByName finds a fault type.
func faultByName(name string) (fault, bool) {
	for _, f := range faults {
		if f.name == name {
			return f, true
		}
	}
	return fault{}, false
}

// takeoverTimeout bounds the wait for a standby to lead while the old
// leader is frozen or cut off: Consul may keep an unrenewed session for up
// to twice its TTL, then adds the lock-delay.
func (w *world) takeoverTimeout() time.Duration { return 4*w.tm.TTL + 20*time.Second }

// closedAt waits briefly for the fence to see in's connection end and
// returns that time, 0 if it did not.
func (w *world) closedAt(in fence.Instance) fence.Mono {
	deadline := time.Now().Add(5 * time.Second)
	for {
		if c := w.fence.Instances()[in.ID].Closed; c != 0 || time.Now().After(deadline) {
			return c
		}
		time.Sleep(pollEvery)
	}
}

// stopped measures the time from at to in's death.
func (w *world) stopped(in fence.Instance, at fence.Mono) outcome {
	o := outcome{at: at}
	if c := w.closedAt(in); c != 0 {
		o.stopAfter, o.stopped = c.Sub(at), true
	}
	return o
}

func killLeader(w *world, h *host, _ fence.Instance) outcome {
	at := fence.Now()
	_ = h.proc.Signal(syscall.SIGKILL)
	return outcome{at: at}
}

func killChild(w *world, _ *host, in fence.Instance) outcome {
	at := fence.Now()
	_ = syscall.Kill(in.Pid, syscall.SIGKILL)
	return outcome{at: at}
}

func freezeLeaderrun(w *world, h *host, in fence.Instance) outcome {
	h.frozen = true
	at := fence.Now()
	_ = h.proc.Signal(syscall.SIGSTOP)
	ok := w.waitTakeover(in, at, w.tm.TTL, w.takeoverTimeout(), true)
	_ = h.proc.Signal(syscall.SIGCONT)
	h.frozen = false
	if !ok {
		w.t.Errorf("freeze-leaderrun: no other host led within %v while %s's leaderrun was stopped (child alive: %v)\n%s",
			w.takeoverTimeout(), h.id, Alive(in.Pid), w.describe())
	}
	return w.stopped(in, at)
}

func freezeHost(w *world, h *host, in fence.Instance) outcome {
	g := w.guardOf(h)
	if g == 0 {
		w.t.Errorf("freeze-host: %s leads without a dead-man guard", h.id)
	}
	h.frozen = true
	at := fence.Now()
	_ = syscall.Kill(-in.Pid, syscall.SIGSTOP)
	if g != 0 {
		_ = syscall.Kill(g, syscall.SIGSTOP)
	}
	_ = h.proc.Signal(syscall.SIGSTOP)
	ok := w.waitTakeover(in, at, w.tm.TTL, w.takeoverTimeout(), false)

	// Wake the child first and let it try to write as the stale leader it
	// now is, as a resumed VM's process may run before anything else.
	before := w.fence.Instances()[in.ID].Rejected + w.fence.Instances()[in.ID].Accepted
	_ = syscall.Kill(-in.Pid, syscall.SIGCONT)
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		cur := w.fence.Instances()[in.ID]
		if cur.Rejected+cur.Accepted > before {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if g != 0 {
		_ = syscall.Kill(g, syscall.SIGCONT)
	}
	_ = h.proc.Signal(syscall.SIGCONT)
	h.frozen = false
	if !ok {
		w.t.Errorf("freeze-host: no other host led within %v while %s was frozen\n%s", w.takeoverTimeout(), h.id, w.describe())
	}
	if !waitDead(in.Pid, 10*time.Second) {
		w.t.Errorf("freeze-host: the old child %d still runs 10s after its host woke up past its lease", in.Pid)
	}
	return outcome{at: at}
}

func killServer(w *world, _ *host, _ fence.Instance) outcome {
	i := w.rng.IntN(w.cl.Servers())
	at := fence.Now()
	w.cl.Kill(i)
	time.Sleep(w.tm.TTL + time.Second) // the fault's duration
	w.cl.Restart(i)
	w.cl.WaitHealthy(w.t)
	return outcome{at: at}
}

func loseQuorum(w *world, _ *host, in fence.Instance) outcome {
	n := w.cl.Servers()
	a := w.rng.IntN(n)
	b := (a + 1 + w.rng.IntN(n-1)) % n
	at := fence.Now()
	w.cl.Kill(a)
	w.cl.Kill(b)
	// No renewal can succeed now: the leader must stop its child before
	// the lease could expire.
	if !waitDead(in.Pid, 2*w.tm.TTL+5*time.Second) {
		w.t.Errorf("lose-quorum: child %d still runs %v after the quorum was lost", in.Pid, 2*w.tm.TTL+5*time.Second)
	}
	o := w.stopped(in, at)
	if rest := w.tm.TTL - fence.Now().Sub(at); rest > 0 {
		time.Sleep(rest) // the fault lasts at least a TTL
	}
	w.cl.Restart(a)
	w.cl.Restart(b)
	w.cl.WaitHealthy(w.t)
	return o
}

func partition(w *world, h *host, in fence.Instance) outcome {
	mode := Refuse
	if w.rng.IntN(2) == 0 {
		mode = Blackhole
	}
	h.cut = true
	at := fence.Now()
	h.link.Cut(mode)
	ok := w.waitTakeover(in, at, w.tm.TTL, w.takeoverTimeout(), true)
	h.link.Heal()
	h.cut = false
	if !ok {
		w.t.Errorf("partition (%v): no other host led within %v while %s was cut off (child alive: %v)\n%s",
			mode, w.takeoverTimeout(), h.id, Alive(in.Pid), w.describe())
	}
	return w.stopped(in, at)
}

func restartBackend(w *world, _ *host, _ fence.Instance) outcome {
	at := fence.Now()
	for i := 0; i < w.cl.Servers(); i++ {
		w.cl.Kill(i)
	}
	for i := 0; i < w.cl.Servers(); i++ {
		w.cl.Restart(i)
	}
	w.cl.WaitHealthy(w.t)
	return outcome{at: at}
}

// applies reports whether f can be injected on backend.
func (f fault) applies(backend string) bool {
	if f.remote && backend == "local" {
		return false
	}
	return len(f.backends) == 0 || slices.Contains(f.backends, backend)
}

// profile is how the hosts run for f with containment mode contain.
func (f fault) profile(contain string) profile {
	return profile{contain: contain, job: f.job, guardFirst: f.guardFirst}
}

// silentServer blackholes, from the leader's host only, the server its
// client is talking to: the server neither answers nor closes the
// connection, while a quorum stays reachable through the other proxies.
func silentServer(w *world, h *host, _ fence.Instance) outcome {
	busiest, before := 0, make([]int64, len(h.link.Proxies))
	for i, p := range h.link.Proxies {
		before[i] = p.Requests()
	}
	time.Sleep(w.tm.RenewInterval + 200*time.Millisecond) // long enough for a renewal
	var most int64 = -1
	for i, p := range h.link.Proxies {
		if d := p.Requests() - before[i]; d > most {
			busiest, most = i, d
		}
	}
	at := fence.Now()
	h.link.Proxies[busiest].Cut(Blackhole)
	time.Sleep(w.tm.TTL + 2*time.Second) // the fault's duration
	h.link.Proxies[busiest].Heal()
	return outcome{at: at}
}

// escape takes leadership away from a host whose writer escaped its process
// group and session: leaderrun is killed (only its guard, through the
// job's cgroup or marker, can still find the writer) or cut off (leaderrun
// itself must stop the job). The next leader's writer checks through /proc
// that the escaped one is dead, the fence's record shows whether it wrote
// again, and the stray check finds it if it survived.
func escape(w *world, h *host, in fence.Instance) outcome {
	// The escaped writer leads a process group of its own in a session
	// of its own, not the job's.
	if st, ok := Stat(in.Pid); !ok || st.PGid != in.Pid {
		w.t.Errorf("escape: the leader's writer %d is not in a process group of its own (%+v)", in.Pid, st)
	}
	if w.cl.Name() != "local" && w.rng.IntN(2) == 0 {
		o := partition(w, h, in)
		o.how = "partition"
		return o
	}
	o := killLeader(w, h, in)
	o.how = "kill-leader"
	return o
}

// guardFiresFirst stops the leader's leaderrun, and only it, until its guard
// has killed the job at the kill point and released leadership, then lets
// it run again at once. Where the host reaches its backend through proxies,
// the stop strikes as a renewal is on its way (the proxy holds the
// request's bytes until leaderrun is stopped, then passes them on): the
// server grants it, the guard never hears of it, and with a kill grace
// below the renew interval that renewal's stop point lies after the
// guard's kill point, so the supervisor wakes up, reads the grant and
// finds itself inside its own deadline although its guard fired. On the
// local backend, which has no request to hold, the stop strikes at a
// random point and the supervisor wakes a moment after the guard's kill,
// within the safety margin before its own deadline, while its flock, which
// cannot expire, may look alive to it. Either way it must see that its
// term is over: exit 123 without starting the child again, which --restart
// on-failure would otherwise do.
func guardFiresFirst(w *world, h *host, in fence.Instance) outcome {
	tm := w.prof.timing(w.tm)
	if w.guardOf(h) == 0 {
		w.t.Errorf("guard-fires-first: %s leads without a dead-man guard", h.id)
	}
	h.frozen = true
	at, how := w.stopAtRenewal(h, tm)
	// The guard's kill point is at most TTL - margin after the last
	// renewal it heard of.
	dead := waitDead(in.Pid, tm.TTL+5*time.Second)
	_ = h.proc.Signal(syscall.SIGCONT)
	resumed := fence.Now()
	h.frozen = false
	if !dead {
		w.t.Errorf("guard-fires-first: the job %d of the stopped leaderrun of %s still runs %v later: its guard did not kill it",
			in.Pid, h.id, tm.TTL+5*time.Second)
		return outcome{at: at, how: how}
	}
	o := w.stopped(in, at)
	o.how = how
	if o.stopped {
		o.resumeLag, o.resumed = resumed.Sub(at.Add(o.stopAfter)), true
	}
	wait := tm.TTL + 5*time.Second
	code, exited := h.proc.Wait(wait)
	switch {
	case !exited:
		w.t.Errorf("guard-fires-first (%s): %s's leaderrun still runs %v after it woke up, though its guard had killed the job and released leadership\n%s",
			how, h.id, wait, w.describe())
		h.proc.Kill() // its guard takes whatever it started again with it
	case code != 123:
		w.t.Errorf("guard-fires-first (%s): %s's leaderrun exited %d after its guard had fired, want 123 (leadership lost)\n%s", how, h.id, code, h.proc.Output(8<<10))
	}
	return o
}

// stopAtRenewal SIGSTOPs h's leaderrun as its next renewal passes its
// proxies (on Consul: the heartbeat transaction, the renewal's last
// request; elsewhere the host's next bytes, which while it leads are
// mostly renewals), or at once if none passes within a renew interval and
// a second, or if the host has no proxies. It returns when it stopped it
// and how.
func (w *world) stopAtRenewal(h *host, tm Timing) (fence.Mono, string) {
	if len(h.link.Proxies) == 0 {
		at := fence.Now()
		_ = h.proc.Signal(syscall.SIGSTOP)
		return at, "stop at a random point"
	}
	var match func([]byte) bool
	if w.cl.Name() == "consul" {
		match = func(b []byte) bool { return bytes.Contains(b, []byte("PUT /v1/txn")) }
	}
	fired := make(chan fence.Mono, 1)
	var once sync.Once
	pid := h.proc.Pid()
	stop := func() {
		once.Do(func() {
			at := fence.Now()
			_ = syscall.Kill(pid, syscall.SIGSTOP)
			fired <- at
		})
	}
	for _, p := range h.link.Proxies {
		p.BeforeForward(match, stop)
	}
	defer func() {
		for _, p := range h.link.Proxies {
			p.BeforeForward(nil, nil)
		}
	}()
	select {
	case at := <-fired:
		return at, "stop as a renewal was in flight"
	case <-time.After(tm.RenewInterval + time.Second):
		stop()
		return <-fired, "stop at a random point (no renewal seen)"
	}
}

// bothKilled SIGKILLs the leader's leaderrun and its guard at once while
// its writer is a daemon outside the job's process group, then starts the
// same host's leaderrun again. Nothing of the dead leadership kills the
// daemon any more: only a leaderrun that finds the job of a dead
// supervisor (its cgroup, or its marker) can, and it must, before any new
// child of the key starts.
func bothKilled(w *world, h *host, in fence.Instance) outcome {
	if st, ok := Stat(in.Pid); !ok || st.PGid != in.Pid {
		w.t.Errorf("both-killed: the leader's writer %d is not in a process group of its own (%+v)", in.Pid, st)
	}
	g := w.guardOf(h)
	if g == 0 {
		w.t.Errorf("both-killed: %s leads without a dead-man guard", h.id)
	}
	at := fence.Now()
	if g != 0 {
		_ = syscall.Kill(g, syscall.SIGKILL)
	}
	_ = h.proc.Signal(syscall.SIGKILL)
	if code, ok := h.proc.Wait(10 * time.Second); !ok || code != 137 {
		w.t.Errorf("both-killed: %s's leaderrun did not die of SIGKILL within 10s (exited: %v, code %d)", h.id, ok, code)
	}
	w.start(h)
	if !w.waitNewLeadership(in, at, w.takeoverTimeout()) {
		w.t.Errorf("both-killed: no new leadership within %v after %s's leaderrun and guard were killed\n%s", w.takeoverTimeout(), h.id, w.describe())
	}
	return w.stopped(in, at)
}

// forkStorm takes leadership from a host whose job keeps forking, by one of
// the faults that make the supervisor (kill-child, a partition) or the
// guard (kill-leader, a frozen leaderrun) sweep the job.
func forkStorm(w *world, h *host, in fence.Instance) outcome {
	if n := w.waitJobSize(in.Pid, 2, time.Second); n < 2 {
		w.t.Errorf("fork-storm: the leader's job has %d process(es), want the writer and its relays", n)
	}
	type way struct {
		name   string
		inject func(*world, *host, fence.Instance) outcome
	}
	choices := []way{{"kill-leader", killLeader}, {"kill-child", killChild}, {"freeze-leaderrun", freezeLeaderrun}}
	if w.cl.Name() != "local" {
		choices = append(choices, way{"partition", partition})
	}
	c := choices[w.rng.IntN(len(choices))]
	o := c.inject(w, h, in)
	o.how = c.name
	return o
}

// waitNewLeadership waits until a child of a later leadership than old's
// has written after at, on any host.
func (w *world) waitNewLeadership(old fence.Instance, at fence.Mono, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		wr, in, ok := w.fence.LastAccepted()
		if ok && in.Epoch > old.Epoch && wr.At > at {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pollEvery)
	}
}

// waitJobSize waits up to timeout until the job of pid has at least n
// processes of the writer, and returns how many it has.
func (w *world) waitJobSize(pid, n int, timeout time.Duration) int {
	mark := JobMarker(pid)
	deadline := time.Now().Add(timeout)
	for {
		size := 0
		for _, p := range Scan(w.bins.Writer) {
			if mark != "" && JobMarker(p.Pid) == mark {
				size++
			}
		}
		if size >= n || time.Now().After(deadline) {
			return size
		}
		time.Sleep(pollEvery)
	}
}

// zombieJob stops the leader's writer, a job that pings the watchdog after
// each write: the job hangs while its leaderrun renews. The leaderrun must
// stop it (its SIGTERM waits, its SIGKILL after the kill grace does not)
// and hand the key over without exiting; another host's child must write
// within the watchdog, the kill grace and a takeover.
func zombieJob(w *world, h *host, in fence.Instance) outcome {
	at := fence.Now()
	_ = syscall.Kill(in.Pid, syscall.SIGSTOP)
	o := w.stopped(in, at)
	bound := zombieWatchdog + w.tm.KillGrace + w.takeoverTimeout()
	if !w.waitNewLeadership(in, at, bound) {
		w.t.Errorf("zombie-job: no other leadership wrote within %v of %s's writer hanging\n%s", bound, h.id, w.describe())
	}
	_ = syscall.Kill(in.Pid, syscall.SIGCONT)
	if h.proc.Exited() {
		w.t.Errorf("zombie-job: %s's leaderrun exited; it must hand over and stand by", h.id)
	}
	return o
}
