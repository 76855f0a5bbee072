//go:build linux

package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/leaderrun/leaderrun/tests/chaos"
)

// The stamp benchmark measures a failover the way leaderrun's target is
// stated: from a CLOCK_REALTIME reading taken just before kill(2) of the
// leader's leaderrun (SIGKILL: a crash; SIGTERM: a handoff) to the first
// instruction of the standby's child, a tiny C program that reads
// CLOCK_REALTIME before anything else and writes it to a file
// (testsupport.StampChild). Leader and standby run on this host and talk
// to the backend's servers directly: no proxy, no fenced writer, no Go
// runtime starting in the child. Their JSON log lines, whose timestamps
// are on the same clock, place the steps between.

// StampTrial is one failover measured with the stamp child.
type StampTrial struct {
	// Failover is from the clock reading before kill(2) to the standby's
	// child's stamp.
	Failover time.Duration
	// At is, by step name (BreakdownSteps), when the old leader or the
	// standby logged it, from the same reading.
	At  map[string]time.Duration
	Err string
}

// StampSet is a stamp run's trials, by backend and kind.
type StampSet struct {
	Backends []string
	Timing   map[string]string
	Trials   map[string]map[string][]StampTrial
}

// NewStampSet returns an empty set.
func NewStampSet() *StampSet {
	return &StampSet{Timing: map[string]string{}, Trials: map[string]map[string][]StampTrial{}}
}

// Add records trials of kind on the rig's backend.
func (s *StampSet) Add(r *StampRig, kind string, ts []StampTrial) {
	be := r.cl.Name()
	if s.Trials[be] == nil {
		s.Backends = append(s.Backends, be)
		s.Trials[be] = map[string][]StampTrial{}
		s.Timing[be] = strings.Join(r.timingArgs(), " ")
	}
	s.Trials[be][kind] = append(s.Trials[be][kind], ts...)
}

// stampTargets are leaderrun's targets for both kinds, by backend: the
// median and, where one is set, the 95th percentile.
var stampTargets = map[string][2]time.Duration{
	"etcd":       {10 * time.Millisecond, 15 * time.Millisecond},
	"zookeeper":  {10 * time.Millisecond, 15 * time.Millisecond},
	"local":      {10 * time.Millisecond, 15 * time.Millisecond},
	"consul":     {15 * time.Millisecond, 0},
	"kubernetes": {15 * time.Millisecond, 0},
	"postgres":   {25 * time.Millisecond, 0},
	"dynamodb":   {100 * time.Millisecond, 0},
}

// target renders a backend's target.
func stampTarget(be string) string {
	tg, ok := stampTargets[be]
	switch {
	case !ok:
		return "–"
	case tg[1] == 0:
		return "median ≤ " + chaos.Ms(tg[0])
	default:
		return fmt.Sprintf("median ≤ %s, p95 ≤ %s", chaos.Ms(tg[0]), chaos.Ms(tg[1]))
	}
}

// msu is msf with its unit.
func msu(d time.Duration) string { return msf(d) + " ms" }

// Table is the failover table: per backend and kind, the sample and the
// target beside it.
func (s *StampSet) Table() string {
	header := []string{"backend", "kind", "median", "p95", "max", "n", "failed", "target"}
	var rows [][]string
	for _, be := range s.Backends {
		for _, kind := range []string{KindCrash, KindGraceful} {
			var d chaos.Durations
			failed := 0
			for _, tr := range s.Trials[be][kind] {
				if tr.Err != "" {
					failed++
					continue
				}
				d = append(d, tr.Failover)
			}
			med, p95, mx := "–", "–", "–"
			if len(d) > 0 {
				med, p95, mx = msu(d.Median()), msu(d.Quantile(0.95)), msu(d.Max())
			}
			rows = append(rows, []string{be, stampKindName(kind), med, p95, mx, strconv.Itoa(len(d)), strconv.Itoa(failed), stampTarget(be)})
		}
	}
	return chaos.Table(header, rows)
}

// stampKindName is a kind as the stamp tables name it.
func stampKindName(kind string) string {
	if kind == KindGraceful {
		return "handoff (SIGTERM)"
	}
	return "crash (SIGKILL)"
}

// Steps is, per kind, a table of where the time went: a row a logged
// step, a column a backend, a cell the step's median point from the kill;
// the stamp last.
func (s *StampSet) Steps() string {
	var b strings.Builder
	for _, kind := range []string{KindCrash, KindGraceful} {
		var names []string
		for _, st := range BreakdownSteps(kind) {
			if st.Message != "" {
				names = append(names, st.Name)
			}
		}
		header := []string{"step"}
		var cols []map[string]chaos.Durations
		var stamps []chaos.Durations
		for _, be := range s.Backends {
			at := map[string]chaos.Durations{}
			var stamp chaos.Durations
			for _, tr := range s.Trials[be][kind] {
				if tr.Err != "" {
					continue
				}
				stamp = append(stamp, tr.Failover)
				for n, d := range tr.At {
					at[n] = append(at[n], d)
				}
			}
			if len(stamp) == 0 {
				continue
			}
			header = append(header, be)
			cols, stamps = append(cols, at), append(stamps, stamp)
		}
		if len(cols) == 0 {
			continue
		}
		var rows [][]string
		for _, n := range names {
			row := []string{n}
			for i, at := range cols {
				switch {
				case len(at[n]) == 0:
					row = append(row, "–")
				case len(at[n]) < len(stamps[i]):
					// A median of fewer trials than the stamp's.
					row = append(row, fmt.Sprintf("%s (%d of %d)", msu(at[n].Median()), len(at[n]), len(stamps[i])))
				default:
					row = append(row, msu(at[n].Median()))
				}
			}
			rows = append(rows, row)
		}
		row := []string{"**stamp: the new child's first instruction**"}
		for _, st := range stamps {
			row = append(row, "**"+msu(st.Median())+"**")
		}
		rows = append(rows, row)
		fmt.Fprintf(&b, "%s, medians from the kill:\n\n%s\n", stampKindName(kind), chaos.Table(header, rows))
	}
	return b.String()
}

// Errors lists the trials that failed.
func (s *StampSet) Errors() []string {
	var out []string
	for _, be := range s.Backends {
		for _, kind := range []string{KindCrash, KindGraceful} {
			for _, tr := range s.Trials[be][kind] {
				if tr.Err != "" {
					out = append(out, fmt.Sprintf("%s %s: %s", be, kind, firstLine(tr.Err)))
				}
			}
		}
	}
	return out
}

// StampRig is one key on one backend, with a leader and a standby
// leaderrun that run the stamp child and reach the servers directly.
type StampRig struct {
	cl    chaos.Cluster
	bins  chaos.Binaries
	stamp string // the stamp child
	dir   string
	key   string
	n     int // candidates started so far

	leader, standby *stampCand
}

// stampCand is one leaderrun and the file its child stamps.
type stampCand struct {
	proc *chaos.Proc
	file string
}

// NewStampRig makes a rig on cl; its candidates' logs and stamps go to
// dir.
func NewStampRig(cl chaos.Cluster, bins chaos.Binaries, stamp, dir string) *StampRig {
	return &StampRig{cl: cl, bins: bins, stamp: stamp, dir: dir, key: "stamp-" + cl.Name()}
}

// timingArgs is the suite's timing on the rig's backend, as leaderrun's
// flags.
func (r *StampRig) timingArgs() []string {
	args := r.cl.Timing().Args()
	if ld := r.cl.Timing().LockDelay; ld > 0 {
		args = append(args, "--consul-lock-delay", ld.String())
	}
	return args
}

// addrs are every server's own address.
func (r *StampRig) addrs() []string {
	var out []string
	for i := 0; i < r.cl.Servers(); i++ {
		out = append(out, r.cl.ServerAddr(i))
	}
	return out
}

// start starts a candidate, its child stamping a file of its own.
func (r *StampRig) start() (*stampCand, error) {
	r.n++
	id := fmt.Sprintf("cand-%d", r.n)
	c := &stampCand{file: filepath.Join(r.dir, id+".stamp")}
	args := append(append(r.cl.LeaderrunArgs(r.addrs()), r.cl.Timing().Args()...),
		"--key", r.key, "--id", id, "--log-format", "json", "--log-level", "debug", "--", r.stamp, c.file)
	p, err := chaos.Start(chaos.ProcSpec{Name: id, Path: r.bins.Leaderrun, Args: args, Env: chaos.HostEnv(r.cl),
		LogPath: filepath.Join(r.dir, id+".log"), KeepLines: true})
	if err != nil {
		return nil, err
	}
	c.proc = p
	return c, nil
}

// readStamp reads a stamp file: its nanoseconds once the whole line is
// there.
func readStamp(file string) (int64, bool) {
	b, err := os.ReadFile(file)
	if err != nil || !strings.HasSuffix(string(b), "\n") {
		return 0, false
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return ns, err == nil
}

// waitStamp polls c's stamp until bound passes or c exits. The poll's
// pace does not enter the measure: the child stamps its own start.
func waitStamp(c *stampCand, bound time.Duration) (int64, error) {
	deadline := time.Now().Add(bound)
	for time.Now().Before(deadline) {
		if ns, ok := readStamp(c.file); ok {
			return ns, nil
		}
		if c.proc.Exited() {
			return 0, fmt.Errorf("%s exited (%d) before its child stamped; its log:\n%s", c.proc.Name, c.proc.Code(), c.proc.Output(4096))
		}
		time.Sleep(2 * time.Millisecond)
	}
	return 0, fmt.Errorf("%s's child did not stamp within %v; its log:\n%s", c.proc.Name, bound, c.proc.Output(4096))
}

// logged reports whether c has logged a line with message msg.
func (c *stampCand) logged(msg string) bool {
	return slices.ContainsFunc(parseLogLines(c.proc.Lines()), func(l logLine) bool { return l.Message == msg })
}

// bound is how long a failover may take before the trial counts as failed.
func (r *StampRig) bound() time.Duration {
	tm := r.cl.Timing()
	return 3*tm.TTL + tm.LockDelay + 20*time.Second
}

// ready makes sure the rig has a leader whose child stamped and a standby
// that is waiting for it, then lets both settle.
func (r *StampRig) ready() error {
	if r.leader == nil || r.leader.proc.Exited() {
		r.Close()
		c, err := r.start()
		if err != nil {
			return err
		}
		r.leader = c
		if _, err := waitStamp(c, r.bound()); err != nil {
			return fmt.Errorf("leader: %w", err)
		}
	}
	if r.standby == nil || r.standby.proc.Exited() {
		c, err := r.start()
		if err != nil {
			return err
		}
		r.standby = c
	}
	deadline := time.Now().Add(r.bound())
	for !r.standby.logged("waiting for the holder") {
		if r.standby.proc.Exited() || time.Now().After(deadline) {
			return fmt.Errorf("standby did not say it waits for the holder; its log:\n%s", r.standby.proc.Output(4096))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, ok := readStamp(r.standby.file); ok {
		return fmt.Errorf("the standby's child ran before the trial")
	}
	time.Sleep(stampSettle)
	return nil
}

// stampSettle is how long the standby is left waiting before the kill, so
// that its campaign is parked (on a watch, a blocking read, a poll) and
// the start-up's work is over.
const stampSettle = 300 * time.Millisecond

// Trial runs one failover of kind (KindCrash or KindGraceful): a clock
// reading, then at once kill(2) of the leader's leaderrun; then it waits
// for the standby's stamp and for the old side to be gone (its leaderrun,
// guard and child), and places the logged steps.
func (r *StampRig) Trial(kind string) StampTrial {
	tr := StampTrial{At: map[string]time.Duration{}}
	if err := r.ready(); err != nil {
		tr.Err = err.Error()
		r.Close()
		return tr
	}
	old, sb := r.leader, r.standby
	sig := syscall.SIGTERM
	if kind == KindCrash {
		sig = syscall.SIGKILL
	}
	// Every guard and stamp child alive now belongs to the leader.
	var before []int
	for _, p := range chaos.Scan(r.bins.Guard, r.stamp) {
		before = append(before, p.Pid)
	}

	t0 := time.Now()
	err := syscall.Kill(old.proc.Pid(), sig)
	if err != nil {
		tr.Err = fmt.Sprintf("kill %d: %v", old.proc.Pid(), err)
		r.Close()
		return tr
	}
	ns, err := waitStamp(sb, r.bound())
	if err != nil {
		tr.Err = err.Error()
		r.Close()
		return tr
	}
	tr.Failover = time.Duration(ns - t0.UnixNano())
	r.leader, r.standby = sb, nil

	// The old side's last lines come as it ends.
	deadline := time.Now().Add(r.bound())
	for !old.proc.Exited() || slices.ContainsFunc(before, chaos.Alive) {
		if time.Now().After(deadline) {
			tr.Err = fmt.Sprintf("the old leader's leaderrun, guard or child still ran %v after the kill: pids %v", r.bound(), before)
			old.proc.Kill()
			r.Close()
			return tr
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The child may run before its leaderrun is back from fork/exec and
	// has logged it.
	for !sb.logged("child started") && !sb.proc.Exited() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	oldLines, sbLines := parseLogLines(old.proc.Lines()), parseLogLines(sb.proc.Lines())
	for _, st := range BreakdownSteps(kind) {
		if st.Message == "" {
			continue
		}
		lines := sbLines
		if st.Old {
			lines = oldLines
		}
		if at, ok := firstAfter(lines, st.Module, st.Message, t0.Truncate(time.Microsecond)); ok {
			tr.At[st.Name] = at.Sub(t0)
		}
	}
	return tr
}

// Close stops the rig's candidates (SIGTERM, then SIGKILL) and waits for
// their guards and children to be gone.
func (r *StampRig) Close() {
	for _, c := range []*stampCand{r.standby, r.leader} {
		if c == nil {
			continue
		}
		_ = c.proc.Signal(syscall.SIGTERM)
		if _, ok := c.proc.Wait(r.cl.Timing().TTL + 10*time.Second); !ok {
			c.proc.Kill()
		}
	}
	r.leader, r.standby = nil, nil
	deadline := time.Now().Add(r.bound())
	for len(chaos.Scan(r.bins.Guard, r.stamp)) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
}
