//go:build linux

package bench

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/chaos"
	"github.com/leaderrun/leaderrun/tests/fence"
)

var (
	flagHolders       = flag.Int("bench.holders", 0, "run only the --holders 3 rows: this many crash and graceful trials per contender (make bench-holders)")
	flagHoldersScale  = flag.String("bench.holders-scale", "3,10,100", "candidate counts of the --holders 3 request-rate rows")
	flagHoldersWindow = flag.Duration("bench.holders-window", 20*time.Second, "request-rate measurement window of the --holders 3 rows")
)

// slots is the N of the semaphore rows.
const slots = 3

// semContender is one tool running a command on at most three hosts:
// leaderrun --holders 3 on etcd or Consul, or `consul lock -n 3`.
type semContender struct {
	name    string
	cluster func(e *Env) chaos.Cluster
	// argv runs one candidate reaching the backend through addrs.
	argv func(e *Env, lock, id string, addrs []string) (string, []string)
	// maxScale caps the request-rate rows (0: none).
	maxScale int
}

func semContenders() []semContender {
	et, ct := chaos.EtcdTiming, chaos.ConsulTiming
	holders := []string{"--holders", strconv.Itoa(slots)}
	return []semContender{
		{name: "leaderrun --holders 3 (etcd, ttl 3s)", cluster: func(e *Env) chaos.Cluster { return e.Etcd },
			argv: func(e *Env, lock, id string, addrs []string) (string, []string) {
				args := append(chaos.Etcd{}.LeaderrunArgs(addrs), et.Args()...)
				args = append(args, holders...)
				return e.Bins.Leaderrun, append(args, "--key", lock, "--id", id, "--", e.Bins.Writer)
			}},
		{name: "leaderrun --holders 3 (consul, ttl 10s)", cluster: func(e *Env) chaos.Cluster { return e.ConsulCl },
			argv: func(e *Env, lock, id string, addrs []string) (string, []string) {
				args := append(chaos.Consul{}.LeaderrunArgs(addrs), ct.Args()...)
				args = append(args, holders...)
				return e.Bins.Leaderrun, append(args, "--key", lock, "--id", id, "--", e.Bins.Writer)
			}},
		{name: "consul lock -n 3 (-shell=false; session ttl 15s)", cluster: func(e *Env) chaos.Cluster { return e.ConsulCl }, maxScale: 10,
			argv: func(e *Env, lock, id string, addrs []string) (string, []string) {
				return e.Consul, []string{"lock", "-http-addr=" + addrs[0], "-name=" + lock, "-shell=false", "-n", strconv.Itoa(slots), lock, e.Bins.Writer}
			}},
	}
}

// semLane is one key with its candidates, each behind a link of its own,
// and a fence per slot (FENCE_ADDR_<slot>; a child without LEADER_SLOT
// writes to slot 0's).
type semLane struct {
	e      *Env
	c      semContender
	cl     chaos.Cluster
	lock   string
	fences []*fence.Server
	cands  []*semCand
}

type semCand struct {
	id      string
	link    *chaos.Link
	proc    *chaos.Proc
	started time.Time
}

var semLanes int

func newSemLane(t *testing.T, e *Env, c semContender, n int) *semLane {
	t.Helper()
	semLanes++
	l := &semLane{e: e, c: c, cl: c.cluster(e), lock: fmt.Sprintf("sem%d", semLanes)}
	for s := 0; s < slots; s++ {
		f, err := fence.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		l.fences = append(l.fences, f)
	}
	t.Cleanup(l.close)
	for i := 0; i < n; i++ {
		link, err := chaos.NewLink(l.cl, i)
		if err != nil {
			t.Fatal(err)
		}
		cd := &semCand{id: fmt.Sprintf("%s-c%d", l.lock, i), link: link}
		l.cands = append(l.cands, cd)
		l.start(t, cd)
	}
	return l
}

func (l *semLane) start(t *testing.T, cd *semCand) {
	path, args := l.c.argv(l.e, l.lock, cd.id, cd.link.Addrs())
	env := l.fences[0].Env(cd.id)
	for s, f := range l.fences {
		env = append(env, "FENCE_ADDR_"+strconv.Itoa(s)+"="+f.Addr())
	}
	p, err := chaos.Start(chaos.ProcSpec{Name: cd.id, Path: path, Args: args, Env: env, LogPath: filepath.Join(l.e.Dir, cd.id+".log")})
	if err != nil {
		t.Fatal(err)
	}
	cd.proc, cd.started = p, time.Now()
}

func (l *semLane) close() {
	for _, cd := range l.cands {
		if cd.proc != nil && !cd.proc.Exited() {
			_ = cd.proc.Signal(syscall.SIGTERM)
		}
	}
	for _, cd := range l.cands {
		if cd.proc != nil {
			if _, ok := cd.proc.Wait(30 * time.Second); !ok {
				cd.proc.Kill()
			}
		}
		cd.link.Close()
	}
	// consul lock leaves its child running when killed: end the writers.
	for _, p := range chaos.Scan(l.e.Bins.Writer) {
		if w, _ := chaos.Getenv(p.Pid, "FENCE_WRITER"); strings.HasPrefix(w, l.lock+"-") {
			_ = syscall.Kill(p.Pid, syscall.SIGKILL)
		}
	}
	for _, f := range l.fences {
		f.Close()
	}
}

// live lists the writers connected now, across the slots' fences.
func (l *semLane) live() []fence.Instance {
	var out []fence.Instance
	for _, f := range l.fences {
		for _, in := range f.Instances() {
			if in.Closed == 0 && in.Accepted > 0 {
				out = append(out, in)
			}
		}
	}
	return out
}

// waitFull waits until three writers write and every candidate still
// running has run for a second.
func (l *semLane) waitFull(t *testing.T, timeout time.Duration) []fence.Instance {
	deadline := time.Now().Add(timeout)
	for {
		ok := true
		for _, cd := range l.cands {
			if time.Since(cd.started) < time.Second && !cd.proc.Exited() {
				ok = false
			}
		}
		if live := l.live(); ok && len(live) == slots {
			return live
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not %d holders within %v (live %v)", l.c.name, slots, timeout, l.live())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (l *semLane) cand(id string) *semCand {
	for _, cd := range l.cands {
		if cd.id == id {
			return cd
		}
	}
	return nil
}

// semTrial strikes one holder's candidate with sig and measures the time
// to the next child's start, and whether the old child still ran then.
type semTrial struct {
	failover time.Duration
	oldAlive bool
	err      string
}

func (l *semLane) trial(t *testing.T, rng *rand.Rand, sig syscall.Signal) semTrial {
	live := l.waitFull(t, 2*time.Minute)
	in := live[rng.IntN(len(live))]
	cd := l.cand(in.Writer)
	if cd == nil {
		return semTrial{err: "no candidate " + in.Writer}
	}
	at := fence.Now()
	_ = cd.proc.Signal(sig)
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		var first fence.Instance
		for _, f := range l.fences {
			for _, x := range f.Instances() {
				if x.Started > at && (first.Started == 0 || x.Started < first.Started) {
					first = x
				}
			}
		}
		if first.Started != 0 {
			tr := semTrial{failover: first.Started.Sub(at), oldAlive: first.Prev == in.Pid && first.PrevAlive() || chaos.Alive(in.Pid)}
			_ = syscall.Kill(in.Pid, syscall.SIGKILL) // an orphan of consul lock
			cd.proc.Wait(30 * time.Second)
			l.start(t, cd)
			return tr
		}
		time.Sleep(10 * time.Millisecond)
	}
	return semTrial{err: "no new child within 2m"}
}

// rate is the lane's backend requests per minute over window.
func (l *semLane) rate(window time.Duration) float64 {
	count := func() int64 {
		var n int64
		for _, cd := range l.cands {
			n += cd.link.Requests()
		}
		return n
	}
	before := count()
	time.Sleep(window)
	return float64(count()-before) * float64(time.Minute) / float64(window)
}

// TestBenchHolders measures the --holders 3 rows against `consul lock -n
// 3` on the same clusters: slot failover after kill -9 of a holder,
// graceful handoff of a slot (SIGTERM), and backend requests per minute
// with 3, 10 and 100 candidates.
func TestBenchHolders(t *testing.T) {
	if *flagHolders <= 0 {
		t.Skip("runs with -bench.holders=N (make bench-holders)")
	}
	e := newEnv(t, 3, 3, 0, false)
	rng := rand.New(rand.NewPCG(28, 3))
	var sizes []int
	for _, s := range strings.Split(*flagHoldersScale, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(s)); err == nil && n > 0 {
			sizes = append(sizes, n)
		}
	}
	header := []string{"contender", "kill -9 of a holder → next child, median / max", "old child alive then",
		"SIGTERM of a holder → next child, median / max", "old child alive then"}
	for _, n := range sizes {
		header = append(header, fmt.Sprintf("requests/min, %d candidates", n))
	}
	var rows [][]string
	for _, c := range semContenders() {
		row := []string{c.name}
		l := newSemLane(t, e, c, slots+2)
		for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
			var d chaos.Durations
			alive := 0
			for i := 0; i < *flagHolders; i++ {
				tr := l.trial(t, rng, sig)
				if tr.err != "" {
					t.Errorf("%s %v: %s", c.name, sig, tr.err)
					continue
				}
				d = append(d, tr.failover)
				if tr.oldAlive {
					alive++
				}
				t.Logf("%s %v trial %d: next child after %v, old child alive %v", c.name, sig, i+1, tr.failover.Round(time.Millisecond), tr.oldAlive)
			}
			if len(d) == 0 {
				row = append(row, "–", "–")
				continue
			}
			row = append(row, chaos.Ms(d.Median())+" / "+chaos.Ms(d.Max()), fmt.Sprintf("%d/%d", alive, len(d)))
		}
		l.close()
		for _, n := range sizes {
			if c.maxScale > 0 && n > c.maxScale {
				row = append(row, "not run")
				continue
			}
			l := newSemLane(t, e, c, n)
			l.waitFull(t, 3*time.Minute)
			r := l.rate(*flagHoldersWindow)
			exited := 0
			for _, cd := range l.cands {
				if cd.proc.Exited() {
					exited++
				}
			}
			l.close()
			t.Logf("%s: %d candidates: %.0f requests/min, %d exited", c.name, n, r, exited)
			cell := fmt.Sprintf("%.0f", r)
			if exited > 0 {
				cell += fmt.Sprintf(" (%d of %d candidates exited)", exited, n)
			}
			row = append(row, cell)
		}
		rows = append(rows, row)
	}
	table := chaos.Table(header, rows)
	t.Logf("--holders 3 rows:\n%s", table)
	if *flagReport != "" {
		cmd := *flagCommand
		if cmd == "" {
			cmd = fmt.Sprintf("go test ./tests/bench -run 'TestBenchHolders$' -v -args -bench.holders=%d -bench.holders-scale=%s -bench.holders-window=%v",
				*flagHolders, *flagHoldersScale, *flagHoldersWindow)
		}
		commit := chaos.Commit()
		body := fmt.Sprintf("Run on %s.\n\n- command: `%s`\n- tree: %s\n- machine: %s\n\n%s", time.Now().UTC().Format("2006-01-02 15:04 MST"),
			cmd, commit, chaos.Machine(), table)
		writeRun(t, "holders", "`make bench-holders`, etcd and Consul", commit, body)
	}
}
