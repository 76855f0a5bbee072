//go:build linux

package bench

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/leaderrun/leaderrun/locker/kubernetes"
	"github.com/leaderrun/leaderrun/tests/chaos"
	"github.com/leaderrun/leaderrun/tests/fence"
)

// Trial kinds.
const (
	KindCrash     = "crash"    // SIGKILL of the leader's supervisor
	KindGraceful  = "graceful" // SIGTERM to the leader's supervisor
	KindRefuse    = "cut-refuse"
	KindBlackhole = "cut-blackhole"
	KindFreeze    = "freeze" // SIGSTOP of the leader's supervisor until the standby leads
)

// maxLaneErrors is how many failed trials a lane tolerates, each followed by
// a fresh lane, before it gives up.
const maxLaneErrors = 3

// Trials runs n trials of one kind on contender c, spread over lanes
// running side by side (each lane its own lock and fence), and returns them
// in the order they ended. A trial that could not run has Err set.
func (e *Env) Trials(c *Contender, kind string, n, lanes int) []Trial {
	var (
		mu     sync.Mutex
		out    []Trial
		issued int
	)
	take := func() bool {
		mu.Lock()
		defer mu.Unlock()
		if issued >= n {
			return false
		}
		issued++
		return true
	}
	// A trial that could not run (its leader had already stepped down, a
	// start timed out) gives its ticket back, so n trials run unless the
	// lanes give up; it is still recorded, with Err.
	giveBack := func() {
		mu.Lock()
		defer mu.Unlock()
		issued--
	}
	var wg sync.WaitGroup
	for i := 0; i < min(lanes, n); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs := 0
			var ln *Lane
			defer func() {
				if ln != nil {
					ln.Close()
				}
			}()
			for take() {
				if ln == nil {
					var err error
					if ln, err = e.NewLane(c, false); err == nil {
						err = ln.Start()
					}
					if err != nil {
						mu.Lock()
						out = append(out, Trial{Err: err.Error()})
						mu.Unlock()
						giveBack()
						if ln != nil {
							ln.Close()
							ln = nil
						}
						if errs++; errs >= maxLaneErrors {
							return
						}
						continue
					}
				}
				tr := ln.run(kind)
				mu.Lock()
				out = append(out, tr)
				mu.Unlock()
				if tr.Err != "" {
					giveBack()
					ln.Close()
					ln = nil
					if errs++; errs >= maxLaneErrors {
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	return out
}

// run runs one trial of kind.
func (ln *Lane) run(kind string) Trial {
	switch kind {
	case KindCrash:
		return ln.Crash()
	case KindGraceful:
		return ln.Graceful()
	case KindRefuse:
		return ln.LeaseLoss(chaos.Refuse)
	case KindBlackhole:
		return ln.LeaseLoss(chaos.Blackhole)
	case KindFreeze:
		return ln.Freeze()
	}
	return Trial{Err: "unknown trial kind " + kind}
}

// Footprint is what a leader and a standby cost while nothing happens.
type Footprint struct {
	Window time.Duration
	// RSS are the largest resident sets seen; CPU the user+system time
	// used during the window. The guard is leaderrun's alone.
	LeaderRSS, GuardRSS, StandbyRSS int64
	// Anon are the largest anonymous parts of the resident sets seen
	// (RssAnon): the memory each process holds alone, where the RSS also
	// counts the binary's pages that the page cache shares.
	LeaderAnon, GuardAnon, StandbyAnon int64
	LeaderCPU, GuardCPU, StandbyCPU    time.Duration
	// Requests sent to the backend during the window.
	LeaderReqs, StandbyReqs int64
	// Wakes are voluntary context switches over all threads during the
	// window: how often each process woke up. Preempts are the
	// involuntary ones (a thread that ran out of its slice).
	LeaderWakes, GuardWakes, StandbyWakes          int64
	LeaderPreempts, GuardPreempts, StandbyPreempts int64
	Err                                            string
}

// footprintSettle is how long a footprint waits before measuring.
const footprintSettle = 35 * time.Second

// Footprint runs a leader and a standby of c, lets them settle, then
// measures them over window.
func (e *Env) Footprint(c *Contender, window time.Duration) Footprint {
	fp := Footprint{Window: window}
	ln, err := e.NewLane(c, false)
	if err != nil {
		fp.Err = err.Error()
		return fp
	}
	defer ln.Close()
	if err := ln.Start(); err != nil {
		fp.Err = err.Error()
		return fp
	}
	if err := ln.ensureStandby(); err != nil {
		fp.Err = err.Error()
		return fp
	}
	leader, standby := ln.leader, ln.standby
	guard := 0
	if c.Leaderrun {
		for _, p := range chaos.Scan(e.Bins.Leaderrun, e.Bins.Guard) {
			if p.IsGuard() && p.PPid == leader.Proc.Pid() {
				guard = p.Pid
			}
		}
	}
	pids := []int{leader.Proc.Pid(), guard, standby.Proc.Pid()}
	// leaderrun gives back its start-up pages 2s and 30s after start
	// (resident.go): what is measured is the process that stays, so every
	// contender settles first (a short window settles as long as it lasts).
	time.Sleep(min(window, footprintSettle))
	cpu := func() [3]time.Duration {
		var out [3]time.Duration
		for i, pid := range pids {
			if st, ok := chaos.Stat(pid); ok && pid != 0 {
				out[i] = st.CPU
			}
		}
		return out
	}
	wakes := func() (vol, invol [3]int64) {
		for i, pid := range pids {
			if pid != 0 {
				vol[i], invol[i] = chaos.ContextSwitches(pid)
			}
		}
		return vol, invol
	}
	cpu0 := cpu()
	w0, p0 := wakes()
	lr0, sr0 := leader.Link.Requests(), standby.Link.Requests()
	var rss, anon [3]int64
	end := time.Now().Add(window)
	for time.Now().Before(end) {
		for i, pid := range pids {
			if pid == 0 {
				continue
			}
			if m, err := chaos.Resident(pid); err == nil {
				rss[i], anon[i] = max(rss[i], m.RSS), max(anon[i], m.Anon)
			}
		}
		time.Sleep(time.Second) // sampling pace
	}
	cpu1 := cpu()
	w1, p1 := wakes()
	fp.LeaderWakes, fp.GuardWakes, fp.StandbyWakes = w1[0]-w0[0], w1[1]-w0[1], w1[2]-w0[2]
	fp.LeaderPreempts, fp.GuardPreempts, fp.StandbyPreempts = p1[0]-p0[0], p1[1]-p0[1], p1[2]-p0[2]
	fp.LeaderRSS, fp.GuardRSS, fp.StandbyRSS = rss[0], rss[1], rss[2]
	fp.LeaderAnon, fp.GuardAnon, fp.StandbyAnon = anon[0], anon[1], anon[2]
	fp.LeaderCPU, fp.GuardCPU, fp.StandbyCPU = cpu1[0]-cpu0[0], cpu1[1]-cpu0[1], cpu1[2]-cpu0[2]
	fp.LeaderReqs, fp.StandbyReqs = leader.Link.Requests()-lr0, standby.Link.Requests()-sr0
	if leader.Proc.Exited() || standby.Proc.Exited() || !chaos.Alive(ln.mustNewest().Pid) {
		fp.Err = fmt.Sprintf("the leader or the standby did not last the window\nleader:\n%s\nstandby:\n%s",
			leader.Proc.Output(4<<10), standby.Proc.Output(4<<10))
	}
	return fp
}

// mustNewest is the newest child, or a zero instance.
func (ln *Lane) mustNewest() fence.Instance {
	in, _ := ln.newest()
	return in
}

// exited describes the lane's candidates that have exited, for errors.
func (ln *Lane) exited() string {
	var b strings.Builder
	for _, c := range ln.all {
		if c.Proc.Exited() {
			fmt.Fprintf(&b, "; %s exited %d: %s", c.ID, c.Proc.Code(), lastLine(c.Proc.Output(4<<10)))
		}
	}
	return b.String()
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// ScalePoint is one contender with n candidates on one key.
type ScalePoint struct {
	N int
	// Failovers are crash failover times (SIGKILL of the leader's
	// supervisor to the next child's start).
	Failovers []time.Duration
	// PerFailover is what the backend served (serverRequests) from each
	// kill to 250ms after the next child's start, less its idle rate over
	// Window for the same time.
	PerFailover []float64
	// Requests is what all candidates sent during Window.
	Requests int64
	Window   time.Duration
	// RSS is the candidates' total resident set at the end of the window.
	RSS int64
	// Note says what else happened; Err why the point could not be measured.
	Note string
	Err  string
}

// serverRequests counts the requests the backend served for lane ln so
// far on its lock key: on Consul its reads and every transaction
// (acquires, heartbeats), as the lane's proxies see them; on Kubernetes
// every request on the lock's Lease, from kube-apiserver's audit log (the
// proxies see TLS records there, not requests). Both leave out the session
// renewals and queue entries that every waiting candidate sends in bursts
// on its own timer. Elsewhere the round trips through the lane's proxies.
func (e *Env) serverRequests(ln *Lane) float64 {
	if ln.onKey != nil {
		return float64(ln.onKey.Load())
	}
	if ln.c.Backend != "kubernetes" || e.Kube == nil {
		return float64(ln.link.Requests())
	}
	name := ln.lock // the rival names its Lease as told
	if ln.c.Leaderrun {
		var err error
		if name, err = kubernetes.LeaseName("leaderrun", ln.lock); err != nil {
			e.T.Fatalf("the lane's Lease name: %v", err)
		}
	}
	n, err := e.Kube.LeaseRequests("default", name)
	if err != nil {
		e.T.Fatalf("kube-apiserver's audit log: %v", err)
	}
	return float64(n)
}

// Scale runs n candidates of c on one key through shared proxies, counts
// their requests over window, then kills the leader trials times.
func (e *Env) Scale(c *Contender, n int, window time.Duration, trials int) ScalePoint {
	sp := ScalePoint{N: n, Window: window}
	ln, err := e.NewLane(c, true)
	if err != nil {
		sp.Err = err.Error()
		return sp
	}
	defer ln.Close()
	if err := ln.Start(); err != nil {
		sp.Err = err.Error()
		return sp
	}
	for i := 1; i < n; i++ {
		if _, err := ln.spawn(nil); err != nil {
			sp.Err = err.Error()
			return sp
		}
	}
	deadline := time.Now().Add(3 * startTimeout)
	for {
		ids, err := ln.members()
		// A candidate may give up while the others start: a leader starved
		// of CPU by a hundred process starts loses its lease and exits 123,
		// as it should. Count those that still run.
		alive := 0
		for _, cand := range ln.all {
			if !cand.Proc.Exited() {
				alive++
			}
		}
		if err == nil && len(ids) >= alive && alive >= n-n/10 {
			if alive < n {
				sp.Note = fmt.Sprintf("%d of %d candidates exited while the others started%s", n-alive, n, ln.exited())
			}
			break
		}
		if time.Now().After(deadline) {
			sp.Err = fmt.Sprintf("only %d of %d candidates registered within %v (%v)%s", len(ids), n, 3*startTimeout, err, ln.exited())
			return sp
		}
		time.Sleep(100 * time.Millisecond)
	}
	if c.Backend == "consul" {
		ln.onKey = new(atomic.Int64)
		key := "/v1/kv/leaderrun/" + ln.lock
		for _, p := range ln.link.Proxies {
			p.OnRequest(func(line string) {
				if strings.Contains(line, key+"?") || strings.Contains(line, key+" ") || strings.Contains(line, " /v1/txn") {
					ln.onKey.Add(1)
				}
			})
		}
	}
	r0, s0 := ln.link.Requests(), e.serverRequests(ln)
	time.Sleep(window) // the measurement window
	sp.Requests = ln.link.Requests() - r0
	idle := e.serverRequests(ln) - s0
	for _, cand := range ln.all {
		if cand.Proc.Exited() {
			continue
		}
		if r, err := chaos.RSS(cand.Proc.Pid()); err == nil {
			sp.RSS += r
		}
	}
	for i := 0; i < min(trials, n-1); i++ { // the last candidate has nobody to hand to
		old, ok := ln.newest()
		var leader *Candidate
		for _, cand := range ln.all {
			if ok && cand.ID == old.Writer && !cand.Proc.Exited() {
				leader = cand
			}
		}
		if leader == nil || !chaos.Alive(old.Pid) {
			sp.Err = "no running leader to kill"
			return sp
		}
		at, r := fence.Now(), e.serverRequests(ln)
		leader.Proc.Kill()
		next, ok := ln.child(nil, old.ID+1, 3*c.TTL+c.LockDelay+30*time.Second)
		if !ok {
			sp.Err = fmt.Sprintf("no candidate took over within %v", 3*c.TTL+c.LockDelay+30*time.Second)
			for _, cand := range ln.all {
				sp.Err += fmt.Sprintf("\n%s:\n%s", cand.ID, cand.Proc.Output(2<<10))
			}
			return sp
		}
		sp.Failovers = append(sp.Failovers, next.Started.Sub(at))
		time.Sleep(next.Started.Add(250 * time.Millisecond).Sub(fence.Now()))
		span := fence.Now().Sub(at)
		sp.PerFailover = append(sp.PerFailover, e.serverRequests(ln)-r-idle*span.Seconds()/window.Seconds())
		if chaos.Alive(old.Pid) {
			_ = syscall.Kill(old.Pid, syscall.SIGKILL)
		}
		ln.waitWrites(next.ID, 3)
	}
	return sp
}
