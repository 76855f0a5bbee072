//go:build linux

package bench

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/chaos"
	"github.com/leaderrun/leaderrun/tests/fence"
)

// Env is what the benchmark runs against: the binaries and the servers. Its
// methods may be called from several goroutines (one per lane).
type Env struct {
	T testing.TB
	// Bins are leaderrun and the fenced writer; Etcdctl and Consul are the
	// rival tools' binaries.
	Bins    chaos.Binaries
	Etcdctl string
	Consul  string
	// Etcd and ConsulCl are the clusters; either may be nil when no
	// contender needs it.
	Etcd     chaos.Cluster
	ConsulCl chaos.Cluster
	// ZooKeeper is the ZooKeeper ensemble; nil when not started.
	ZooKeeper chaos.Cluster
	// Kube is a kube-apiserver (on an etcd of its own) and K8sLock the
	// client-go leader-election wrapper; nil and empty when not started.
	Kube    *chaos.Kube
	K8sLock string
	// Postgres is a PostgreSQL server; nil when not started.
	Postgres *chaos.Postgres
	// DynamoDB is a dynalite server; nil when not started.
	DynamoDB *chaos.DynamoDB
	// Dir holds the processes' logs.
	Dir string

	seq atomic.Int64
}

// cluster is the contender's backend.
func (e *Env) cluster(c *Contender) chaos.Cluster {
	if c.backend != nil {
		return c.backend
	}
	switch c.Backend {
	case "etcd":
		return e.Etcd
	case "zookeeper":
		return e.ZooKeeper
	case "kubernetes":
		if e.Kube != nil {
			return *e.Kube
		}
		return nil
	case "postgres":
		if e.Postgres != nil {
			return *e.Postgres
		}
		return nil
	case "dynamodb":
		if e.DynamoDB != nil {
			return *e.DynamoDB
		}
		return nil
	}
	return e.ConsulCl
}

// Has reports whether the backend of contender c was started.
func (e *Env) Has(c *Contender) bool { return e.cluster(c) != nil }

// Bounds of the waits around a trial.
const (
	pollEvery = 10 * time.Millisecond
	// startTimeout bounds a candidate's way to its first child, or to its
	// registration as a standby.
	startTimeout = 60 * time.Second
)

// Candidate is one process competing for a lock, with its own proxies.
type Candidate struct {
	ID   string
	Link *chaos.Link
	Proc *chaos.Proc
	// shared is set when Link belongs to the lane, not to the candidate.
	shared bool
}

// Lane is one lock and the candidates competing for it, with its own fenced
// resource. Trials run one after another in a lane; lanes run side by side.
type Lane struct {
	e     *Env
	c     *Contender
	lock  string
	fence *fence.Server
	check *fence.Checker
	fed   int
	link  *chaos.Link // shared by every candidate, when set

	leader  *Candidate
	standby *Candidate
	all     []*Candidate
	n       int
	// onKey, when set, counts the requests on the lane's lock key
	// (serverRequests).
	onKey *atomic.Int64
	// extraArgs go before the command of every leaderrun the lane starts,
	// extraEnv into its environment (the step-down lanes' job watchdog).
	extraArgs, extraEnv []string
}

// NewLane makes a lane for contender c. With shared, every candidate goes
// through one set of proxies (the scale runs count the load of all).
func (e *Env) NewLane(c *Contender, shared bool) (*Lane, error) {
	f, err := fence.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	n := e.seq.Add(1)
	slug := strings.NewReplacer(" ", "-", "(", "", ")", "", ",", "", ":", "", "--", "").Replace(c.Tool + "-" + c.Config)
	ln := &Lane{e: e, c: c, lock: fmt.Sprintf("bench%d-%s", n, slug), fence: f, check: fence.NewChecker()}
	if shared {
		if ln.link, err = chaos.NewLink(e.cluster(c), int(n)); err != nil {
			f.Close()
			return nil, err
		}
	}
	return ln, nil
}

// Lock is the lane's lock name.
func (ln *Lane) Lock() string { return ln.lock }

// Close kills every candidate and every child of the lane and frees its
// proxies and fence.
func (ln *Lane) Close() {
	// A killed leaderrun's guard outlives it briefly, to release the
	// lease; it is found while its parent is still there.
	var guards []int
	for _, p := range chaos.Scan(ln.e.Bins.Leaderrun, ln.e.Bins.Guard) {
		for _, c := range ln.all {
			if p.IsGuard() && c.Proc != nil && p.PPid == c.Proc.Pid() {
				guards = append(guards, p.Pid)
			}
		}
	}
	for _, c := range ln.all {
		if c.Proc != nil {
			c.Proc.Kill()
		}
	}
	for _, in := range ln.fence.Instances() {
		if chaos.Alive(in.Pid) {
			_ = syscall.Kill(in.Pid, syscall.SIGKILL)
		}
	}
	deadline := time.Now().Add(15 * time.Second)
	for _, g := range guards {
		for chaos.Alive(g) && time.Now().Before(deadline) {
			time.Sleep(pollEvery)
		}
		if chaos.Alive(g) {
			ln.e.T.Errorf("%s: the guard %d of a killed leaderrun is still there after 15s", ln.c.Name(), g)
			_ = syscall.Kill(g, syscall.SIGKILL)
		}
	}
	for _, c := range ln.all {
		if !c.shared {
			c.Link.Close()
		}
	}
	if ln.link != nil {
		ln.link.Close()
	}
	ln.fence.Close()
}

// spawn starts a new candidate. onReq, when set, observes the HTTP/1
// requests on the candidate's own proxies from its very first one.
func (ln *Lane) spawn(onReq func(string)) (*Candidate, error) {
	ln.n++
	id := fmt.Sprintf("%s-c%d", ln.lock, ln.n)
	c := &Candidate{ID: id, Link: ln.link, shared: ln.link != nil}
	if !c.shared {
		var err error
		if c.Link, err = chaos.NewLink(ln.e.cluster(ln.c), ln.n); err != nil {
			return nil, err
		}
		for _, p := range c.Link.Proxies {
			p.OnRequest(onReq)
		}
	}
	path, args := ln.c.argv(ln.e, ln.lock, id, c.Link.Addrs())
	if i := slices.Index(args, "--"); i >= 0 && len(ln.extraArgs) > 0 {
		args = slices.Concat(args[:i], ln.extraArgs, args[i:])
	}
	p, err := chaos.Start(chaos.ProcSpec{
		Name: id, Path: path, Args: args,
		Env:       slices.Concat(ln.fence.Env(id), []string{"SHELL=/bin/sh"}, chaos.HostEnv(ln.e.cluster(ln.c)), ln.extraEnv),
		LogPath:   filepath.Join(ln.e.Dir, id+".log"),
		KeepLines: ln.c.Leaderrun,
	})
	if err != nil {
		if !c.shared {
			c.Link.Close()
		}
		return nil, err
	}
	c.Proc = p
	ln.all = append(ln.all, c)
	return c, nil
}

// child waits up to timeout for a child of candidate c with an instance id
// of at least from; ok is false if none came.
func (ln *Lane) child(c *Candidate, from int, timeout time.Duration) (fence.Instance, bool) {
	deadline := time.Now().Add(timeout)
	for {
		for _, in := range ln.fence.Instances()[min(from, len(ln.fence.Instances())):] {
			if c == nil || in.Writer == c.ID {
				return in, true
			}
		}
		if time.Now().After(deadline) {
			return fence.Instance{}, false
		}
		time.Sleep(pollEvery)
	}
}

// newest is the latest child of any candidate, ok false before the first.
func (ln *Lane) newest() (fence.Instance, bool) {
	ins := ln.fence.Instances()
	if len(ins) == 0 {
		return fence.Instance{}, false
	}
	return ins[len(ins)-1], true
}

// Start starts the lane's first candidate and waits for its child.
func (ln *Lane) Start() error {
	c, err := ln.spawn(nil)
	if err != nil {
		return err
	}
	if _, ok := ln.child(c, 0, startTimeout); !ok {
		return fmt.Errorf("%s: %s started no child within %v\n%s", ln.c.Name(), c.ID, startTimeout, c.Proc.Output(4<<10))
	}
	ln.leader = c
	return nil
}

// addStandby starts a candidate and waits until the backend lists it
// waiting for the lock (and, on Consul, until it blocks on the lock key).
func (ln *Lane) addStandby() (*Candidate, error) {
	before, err := ln.members()
	if err != nil {
		return nil, err
	}
	blocked := make(chan struct{})
	var once sync.Once
	var watch func(string)
	if ln.c.blocking != nil && ln.link == nil {
		watch = func(line string) {
			if ln.c.blocking(ln.lock, line) {
				once.Do(func() { close(blocked) })
			}
		}
	} else {
		close(blocked)
	}
	c, err := ln.spawn(watch)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(startTimeout)
	for {
		now, err := ln.members()
		registered := err == nil && len(newIDs(before, now)) > 0
		select {
		case <-blocked:
		default:
			registered = false
		}
		if registered {
			return c, nil
		}
		if c.Proc.Exited() || time.Now().After(deadline) {
			return c, fmt.Errorf("%s: standby %s not waiting for the lock within %v (members %v, error %v)\n%s",
				ln.c.Name(), c.ID, startTimeout, now, err, c.Proc.Output(4<<10))
		}
		time.Sleep(pollEvery)
	}
}

// members lists the candidates waiting for the lane's lock, or holding it:
// those the backend lists, or, on a Kubernetes Lease or a lease row
// (PostgreSQL, DynamoDB), which name only their holder, those that are running and connected
// to the server (a candidate reads the lease on the connection it opens,
// and then watches or polls it).
func (ln *Lane) members() ([]string, error) {
	if ln.c.members != nil {
		return ln.c.members(ln.e, ln.lock)
	}
	var ids []string
	for _, c := range ln.all {
		if c.Proc.Exited() {
			continue
		}
		ok, err := connectedTo(c.Proc.Pid(), c.Link.Addrs())
		if err != nil {
			return nil, err
		}
		if ok {
			ids = append(ids, c.ID)
		}
	}
	return ids, nil
}

// newIDs are the ids in now that are not in before.
func newIDs(before, now []string) []string {
	var out []string
	for _, id := range now {
		if !slices.Contains(before, id) {
			out = append(out, id)
		}
	}
	return out
}

// ensureStandby makes sure a standby waits for the lock.
func (ln *Lane) ensureStandby() error {
	if ln.standby != nil && !ln.standby.Proc.Exited() {
		return nil
	}
	c, err := ln.addStandby()
	if err != nil {
		return err
	}
	ln.standby = c
	return nil
}

// Trial is the outcome of one failover trial.
type Trial struct {
	// Handoff: the standby's child started within the trial's bound.
	Handoff bool
	// Failover is from the event (kill, SIGTERM, cut) to the standby's
	// child's start.
	Failover time.Duration
	// Gap is from the old child's death to the new child's start;
	// negative when the old child was still alive (an overlap).
	Gap time.Duration
	// OldAlive: the new child found the old one alive at its start.
	OldAlive bool
	// OldSurvived: the old child never stopped on its own; the benchmark
	// killed it to go on.
	OldSurvived bool
	// Stop is from the event to the old child's death, when it died on
	// its own (lease loss).
	Stop    time.Duration
	Stopped bool
	// SinceRenewal is from leaderrun's last "renewed" log line before the
	// old child's death to that death (lease loss, leaderrun only).
	SinceRenewal time.Duration
	HasRenewal   bool
	// Overlaps is the number of interleavings of accepted writes.
	Overlaps int
	// Err is set when the trial could not be run.
	Err string
}

// Crash kills the leader's supervisor with SIGKILL.
func (ln *Lane) Crash() Trial {
	return ln.trial(func(l *Candidate) { _ = l.Proc.Signal(syscall.SIGKILL) }, 3*ln.c.TTL+ln.c.LockDelay+20*time.Second, false, nil)
}

// Freeze stops the leader's supervisor with SIGSTOP (a stuck or swapped
// out process; its child and, for leaderrun, its guard run on) and
// resumes it once the standby's child started or the bound passed.
func (ln *Lane) Freeze() Trial {
	return ln.trial(func(l *Candidate) { _ = l.Proc.Signal(syscall.SIGSTOP) }, 3*ln.c.TTL+ln.c.LockDelay+20*time.Second, false,
		func(l *Candidate) { _ = l.Proc.Signal(syscall.SIGCONT) })
}

// Graceful sends SIGTERM to the leader's supervisor.
func (ln *Lane) Graceful() Trial {
	return ln.trial(func(l *Candidate) { _ = l.Proc.Signal(syscall.SIGTERM) }, ln.c.TTL+5*time.Second, false, nil)
}

// LeaseLoss cuts the leader off the backend.
func (ln *Lane) LeaseLoss(mode chaos.CutMode) Trial {
	return ln.trial(func(l *Candidate) { l.Link.Cut(mode) }, 3*ln.c.TTL+ln.c.LockDelay+20*time.Second, true, nil)
}

// trial strikes the leader and measures the handoff to the standby. bound
// limits the wait for the standby's child; cut says the leader was cut off
// (then it must stop its child on its own, and is healed afterwards);
// resume, if set, undoes the strike once the standby's child started.
func (ln *Lane) trial(strike func(*Candidate), bound time.Duration, cut bool, resume func(*Candidate)) Trial {
	var tr Trial
	if err := ln.ensureStandby(); err != nil {
		tr.Err = err.Error()
		return tr
	}
	leader, standby := ln.leader, ln.standby
	old, ok := ln.newest()
	if !ok || old.Writer != leader.ID || !chaos.Alive(old.Pid) {
		tr.Err = fmt.Sprintf("%s: the leader %s has no running child", ln.c.Name(), leader.ID)
		return tr
	}
	if cut {
		// A leader in its stride, with a renewal or more behind it.
		for fence.Now().Sub(old.Started) < ln.c.TTL/2 {
			time.Sleep(pollEvery)
		}
	}
	var renewals []chaos.Line
	at := fence.Now()
	strike(leader)

	next, ok := ln.child(standby, old.ID+1, bound)
	if resume != nil {
		resume(leader)
	}
	if cut {
		// The old child must stop on its own. Past twice the TTL the
		// lease has long been free for the standby: a child still alive
		// then is one its supervisor does not stop.
		deadline := time.Now().Add(at.Add(2*ln.c.TTL + 5*time.Second).Sub(fence.Now()))
		for chaos.Alive(old.Pid) && time.Now().Before(deadline) {
			time.Sleep(pollEvery)
		}
		renewals = leader.Proc.Lines()
	}
	if ok {
		tr.Handoff = true
		tr.Failover = next.Started.Sub(at)
		tr.OldAlive = next.PrevAlive()
	}
	if ok && chaos.Alive(old.Pid) {
		// Let both children write a little, so the fence sees the overlap.
		ln.waitWrites(next.ID, 5)
	}
	if chaos.Alive(old.Pid) {
		tr.OldSurvived = true
		_ = syscall.Kill(old.Pid, syscall.SIGKILL)
	}
	closed := ln.closedAt(old.ID)
	if ok && closed != 0 {
		tr.Gap = next.Started.Sub(closed)
	}
	if !tr.OldSurvived && closed != 0 {
		tr.Stop, tr.Stopped = closed.Sub(at), true
		for _, l := range renewals {
			// The acquire's confirming renewal counts as one too.
			if l.At < closed && (strings.Contains(l.Text, ": renewed") || strings.Contains(l.Text, ": acquired")) {
				tr.SinceRenewal, tr.HasRenewal = closed.Sub(l.At), true
			}
		}
	}
	if cut {
		leader.Link.Heal()
	}
	// The old supervisor has no business left; one that is still there
	// (a rival waiting for a child we killed) must go now.
	if _, exited := leader.Proc.Wait(10 * time.Second); !exited {
		leader.Proc.Kill()
	}
	if !ok {
		// No handoff within the bound (a rival that never lets go): with
		// the old child and supervisor gone, the standby must take over.
		var err error
		if next, ok = ln.child(standby, old.ID+1, bound); !ok {
			err = fmt.Errorf("%s: standby %s never led", ln.c.Name(), standby.ID)
			tr.Err = err.Error()
		}
	}
	ln.waitWrites(next.ID, 3)
	r := ln.check.Feed(ln.fence.Log(ln.fed))
	ln.fed += r.Writes
	tr.Overlaps = len(r.Overlaps)
	ln.leader, ln.standby = standby, nil
	return tr
}

// closedAt waits briefly for the fence to see instance id's end.
func (ln *Lane) closedAt(id int) fence.Mono {
	deadline := time.Now().Add(5 * time.Second)
	for {
		if c := ln.fence.Instances()[id].Closed; c != 0 || time.Now().After(deadline) {
			return c
		}
		time.Sleep(pollEvery)
	}
}

// waitWrites waits until instance id has n accepted or rejected writes, or
// for at most a second.
func (ln *Lane) waitWrites(id, n int) {
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		ins := ln.fence.Instances()
		if id < len(ins) && ins[id].Accepted+ins[id].Rejected >= n {
			return
		}
		time.Sleep(pollEvery)
	}
}
