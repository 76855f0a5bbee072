//go:build linux

package bench

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/leaderrun/leaderrun/tests/chaos"
	"github.com/leaderrun/leaderrun/tests/fence"
)

// Step-down: moving the job now (DESIGN §1.16). A lane of one leader and
// two standbys; each round invokes `leaderrun step-down KEY` (or with
// --to, naming a standby) from outside the candidates and measures, from
// the invocation, the old child's death (the fence seeing its connection
// close), the new child's start on another candidate (the writer's own
// clock at the top of its main) and the command's exit. The baseline is
// what the rivals, none of which can step down, leave an operator: stop
// the holder's process (SIGTERM, as `systemctl restart` does) and start it
// again, here a fresh candidate once the old one has exited.

// Step-down round kinds.
const (
	KindStepDown   = "step-down"
	KindStepDownTo = "step-down --to"
	KindRestart    = "SIGTERM to the leader (restart)"
	// KindZombie: the leader's job hangs (SIGSTOP of its writer, which
	// pings WATCHDOG=1 after each write); its leaderrun, with
	// --job-watchdog, stops it and hands over (DESIGN §5).
	KindZombie = "job hung (--job-watchdog 1s)"
)

// StepDownKinds are the kinds of a round, in the order they run.
var StepDownKinds = []string{KindStepDown, KindStepDownTo, KindRestart, KindZombie}

// zombieHow names KindZombie's rows in the table.
const zombieHow = "the leader's job hung (SIGSTOP of its writer; --job-watchdog 1s)"

// zombieWatchdog is the step-down lanes' --job-watchdog: every writer
// pings after each write, so only KindZombie's hung writer misses it.
const zombieWatchdog = time.Second

// stepDownCandidates is a step-down lane's size: a leader and two standbys.
const stepDownCandidates = 3

// stepDownTimeout is the step-down command's --timeout; the wait for the
// new child is a little longer.
const stepDownTimeout = 20 * time.Second

// StepDown is one round of one kind.
type StepDown struct {
	Backend, Kind string
	// From led before; To is the --to candidate; Next led after.
	From, To, Next string
	// Death, Start and Exit are the old child's death, the new child's
	// start and the command's exit, from the invocation (or the SIGTERM).
	Death, Start, Exit time.Duration
	HasDeath, HasExit  bool
	// OldAlive: the new child found the old one alive at its start.
	OldAlive bool
	// Overlaps counts interleavings of the two children's accepted writes.
	Overlaps int
	// Out is what the command printed on its standard output.
	Out string
	Err string
	// at is the invocation, on the fence's clock.
	at fence.Mono
}

// sdLane is a lane of three candidates for step-down rounds.
type sdLane struct {
	*Lane
	// joined orders the candidates by when they last began to wait: a
	// start, or a step-down (the old leader waits again).
	joined map[string]int
	seq    int
}

// live are the lane's candidates that have not exited.
func (l *sdLane) live() []*Candidate {
	var out []*Candidate
	for _, c := range l.all {
		if !c.Proc.Exited() {
			out = append(out, c)
		}
	}
	return out
}

// byID is the candidate named id, nil if none.
func (l *sdLane) byID(id string) *Candidate {
	for _, c := range l.all {
		if c.ID == id {
			return c
		}
	}
	return nil
}

// ensure starts candidates until three run, and waits until the backend
// lists them all waiting or holding (the one that just stepped down
// campaigns again).
func (l *sdLane) ensure() error {
	for len(l.live()) < stepDownCandidates {
		c, err := l.addWaiter()
		if err != nil {
			return err
		}
		l.seq++
		l.joined[c.ID] = l.seq
	}
	deadline := time.Now().Add(startTimeout)
	for {
		ids, err := l.members()
		if err == nil && len(ids) >= stepDownCandidates {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %d of %d candidates listed within %v (%v)%s", l.c.Name(), len(ids), stepDownCandidates, startTimeout, err, l.exited())
		}
		time.Sleep(pollEvery)
	}
}

// addWaiter starts a standby and waits until the backend lists it. Where
// standbys queue (Consul), only the first in line blocks on the key
// itself: a later one counts once the backend lists it.
func (l *sdLane) addWaiter() (*Candidate, error) {
	if l.c.blocking == nil || len(l.live()) < 2 {
		return l.addStandby()
	}
	c, cc := l.c, *l.c
	cc.blocking = nil
	l.c = &cc
	defer func() { l.c = c }()
	return l.addStandby()
}

// target is the --to candidate: of the standbys, the one that began to
// wait last, which a queue would serve last.
func (l *sdLane) target(leader *Candidate) *Candidate {
	var best *Candidate
	for _, c := range l.live() {
		if c != leader && (best == nil || l.joined[c.ID] > l.joined[best.ID]) {
			best = c
		}
	}
	return best
}

// runOnly are the options of a run that the control commands do not take,
// each with its value.
var runOnly = []string{"--ttl", "--renew-interval", "--kill-grace", "--safety-margin", "--log-level", "--log-format", "--id"}

// controlArgv turns a run's command line (the program first) into control
// command cmd's: cmd right after the leaderrun binary, the run's own
// options and its command left out.
func controlArgv(run []string, leaderrun, cmd string) []string {
	i := slices.Index(run, leaderrun)
	if i < 0 {
		return nil
	}
	out := append(slices.Clone(run[:i+1]), cmd)
	for j := i + 1; j < len(run) && run[j] != "--"; j++ {
		if slices.Contains(runOnly, run[j]) {
			j++
			continue
		}
		out = append(out, run[j])
	}
	return out
}

// stepDownCmd is `leaderrun step-down` for the lane's key with its
// contender's backend options, reaching the servers directly (not through
// a candidate's proxies), and --to when to is set.
func (l *sdLane) stepDownCmd(to string) (*exec.Cmd, error) {
	cl := l.e.cluster(l.c)
	var addrs []string
	for i := 0; i < cl.Servers(); i++ {
		addrs = append(addrs, cl.ServerAddr(i))
	}
	path, args := l.c.argv(l.e, l.lock, "operator", addrs)
	argv := controlArgv(append([]string{path}, args...), l.e.Bins.Leaderrun, "step-down")
	if argv == nil {
		return nil, fmt.Errorf("%s: no leaderrun in %s %v", l.c.Name(), path, args)
	}
	argv = append(argv, "--timeout", stepDownTimeout.String())
	if to != "" {
		argv = append(argv, "--to", to)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), chaos.HostEnv(cl)...)
	return cmd, nil
}

// Round runs one round of kind.
func (l *sdLane) Round(kind string) StepDown {
	sd := StepDown{Backend: l.c.Backend, Kind: kind}
	if err := l.ensure(); err != nil {
		sd.Err = err.Error()
		return sd
	}
	old, ok := l.newest()
	leader := l.byID(old.Writer)
	if !ok || leader == nil || leader.Proc.Exited() || !chaos.Alive(old.Pid) {
		sd.Err = fmt.Sprintf("%s: no leader with a running child", l.c.Name())
		return sd
	}
	sd.From = leader.ID
	var (
		cmd            *exec.Cmd
		stdout, stderr bytes.Buffer
		exited         = make(chan fence.Mono, 1)
	)
	if kind != KindRestart && kind != KindZombie {
		if kind == KindStepDownTo {
			sd.To = l.target(leader).ID
		}
		var err error
		if cmd, err = l.stepDownCmd(sd.To); err != nil {
			sd.Err = err.Error()
			return sd
		}
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
	}

	at := fence.Now()
	sd.at = at
	switch {
	case kind == KindZombie:
		_ = syscall.Kill(old.Pid, syscall.SIGSTOP)
	case cmd == nil:
		_ = leader.Proc.Signal(syscall.SIGTERM)
	default:
		if err := cmd.Start(); err != nil {
			sd.Err = err.Error()
			return sd
		}
		go func() {
			_ = cmd.Wait()
			exited <- fence.Now()
		}()
	}
	next, ok := l.child(nil, old.ID+1, stepDownTimeout+5*time.Second)
	if cmd != nil {
		select {
		case end := <-exited:
			sd.Exit, sd.HasExit = end.Sub(at), true
		case <-time.After(stepDownTimeout + 10*time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		sd.Out = strings.TrimSpace(stdout.String())
	}
	if closed := l.closedAt(old.ID); closed != 0 {
		sd.Death, sd.HasDeath = closed.Sub(at), true
	}
	if ok {
		sd.Start, sd.Next, sd.OldAlive = next.Started.Sub(at), next.Writer, next.PrevAlive()
		l.waitWrites(next.ID, 3)
	}
	if chaos.Alive(old.Pid) {
		sd.Err = fmt.Sprintf("%s %s: the old child %d still runs", l.c.Name(), kind, old.Pid)
		_ = syscall.Kill(old.Pid, syscall.SIGKILL)
	}
	r := l.check.Feed(l.fence.Log(l.fed))
	l.fed += r.Writes
	sd.Overlaps = len(r.Overlaps)

	switch {
	case sd.Err != "":
	case !ok:
		sd.Err = fmt.Sprintf("%s %s: no new child within %v; command exit %v: %s%s", l.c.Name(), kind, stepDownTimeout+5*time.Second,
			cmdExit(cmd), strings.TrimSpace(stderr.String()), l.exited())
	case next.Writer == sd.From:
		sd.Err = fmt.Sprintf("%s %s: %s led again", l.c.Name(), kind, sd.From)
	case cmd != nil && (!sd.HasExit || cmd.ProcessState.ExitCode() != 0):
		sd.Err = fmt.Sprintf("%s %s: command exit %v: %s", l.c.Name(), kind, cmdExit(cmd), strings.TrimSpace(stderr.String()))
	}
	if kind == KindRestart {
		// The old leaderrun exits; ensure starts its successor, as the
		// restart would.
		if _, done := leader.Proc.Wait(10 * time.Second); !done {
			leader.Proc.Kill()
		}
	} else {
		l.seq++
		l.joined[leader.ID] = l.seq
	}
	if c := l.byID(next.Writer); ok && c != nil {
		l.leader = c
	}
	return sd
}

// cmdExit describes how cmd ended.
func cmdExit(cmd *exec.Cmd) string {
	if cmd == nil || cmd.ProcessState == nil {
		return "none"
	}
	return cmd.ProcessState.String()
}

// StepDowns runs n rounds of every kind on contender c in one lane (a
// fresh lane after a round that could not run, which is kept with Err, up
// to maxLaneErrors of them), kinds interleaved.
func (e *Env) StepDowns(c *Contender, n int) []StepDown {
	var out []StepDown
	var l *sdLane
	defer func() {
		if l != nil {
			l.Close()
		}
	}()
	done := map[string]int{}
	errs := 0
	for round := 0; errs < maxLaneErrors; round++ {
		kind := StepDownKinds[round%len(StepDownKinds)]
		if done[kind] >= n {
			if slices.ContainsFunc(StepDownKinds, func(k string) bool { return done[k] < n }) {
				continue
			}
			break
		}
		if l == nil {
			ln, err := e.NewLane(c, false)
			if err == nil && c.Leaderrun {
				ln.extraArgs, ln.extraEnv = []string{"--job-watchdog", zombieWatchdog.String()}, []string{"FENCE_PING=1"}
			}
			if err == nil {
				err = ln.Start()
			}
			if err != nil {
				errs++
				out = append(out, StepDown{Backend: c.Backend, Kind: kind, Err: err.Error()})
				if ln != nil {
					ln.Close()
				}
				continue
			}
			l = &sdLane{Lane: ln, joined: map[string]int{ln.leader.ID: 0}}
		}
		sd := l.Round(kind)
		out = append(out, sd)
		if sd.Err == "" {
			done[kind]++
			continue
		}
		errs++
		l.Close()
		l = nil
	}
	return out
}

// StepDownSet is every step-down round of a run, by backend and kind.
type StepDownSet struct {
	Backends []string
	Rounds   map[string]map[string][]StepDown
	// Rivals are the rival rows: from this run's graceful trials, or
	// copied from a report's failover table.
	Rivals [][]string
}

// NewStepDownSet returns an empty set.
func NewStepDownSet() *StepDownSet {
	return &StepDownSet{Rounds: map[string]map[string][]StepDown{}}
}

// Add records rounds.
func (s *StepDownSet) Add(sds []StepDown) {
	for _, sd := range sds {
		if s.Rounds[sd.Backend] == nil {
			s.Rounds[sd.Backend] = map[string][]StepDown{}
			s.Backends = append(s.Backends, sd.Backend)
		}
		s.Rounds[sd.Backend][sd.Kind] = append(s.Rounds[sd.Backend][sd.Kind], sd)
	}
}

// Errors lists the rounds that could not run.
func (s *StepDownSet) Errors() []string {
	var out []string
	for _, be := range s.Backends {
		for _, kind := range StepDownKinds {
			for _, sd := range s.Rounds[be][kind] {
				if sd.Err != "" {
					out = append(out, fmt.Sprintf("%s %s: %s", be, kind, firstLine(sd.Err)))
				}
			}
		}
	}
	return out
}

// medP99 formats a sample as "median / p99".
func medP99(d chaos.Durations) string {
	if len(d) == 0 {
		return "–"
	}
	return chaos.Ms(d.Median()) + " / " + chaos.Ms(d.Quantile(0.99))
}

// stepDownHeader is the step-down table's header.
var stepDownHeader = []string{"backend", "how", "rounds", "old child dead: median / p99", "new child started elsewhere: median / p99",
	"command exited: median / p99", "new child saw old alive", "overlapping writes"}

// Table is the step-down table: per backend a row a kind, then the rival
// rows.
func (s *StepDownSet) Table() string {
	var rows [][]string
	for _, be := range s.Backends {
		for _, kind := range StepDownKinds {
			var death, start, exit chaos.Durations
			alive, overlaps, ran, toOK := 0, 0, 0, 0
			for _, sd := range s.Rounds[be][kind] {
				if sd.Err != "" {
					continue
				}
				ran++
				if sd.HasDeath {
					death = append(death, sd.Death)
				}
				start = append(start, sd.Start)
				if sd.HasExit {
					exit = append(exit, sd.Exit)
				}
				if sd.OldAlive {
					alive++
				}
				if sd.Overlaps > 0 {
					overlaps++
				}
				if sd.Next == sd.To {
					toOK++
				}
			}
			if ran == 0 {
				continue
			}
			how := "`leaderrun step-down`"
			switch kind {
			case KindStepDownTo:
				how = fmt.Sprintf("`leaderrun step-down --to ID` (%d/%d to ID)", toOK, ran)
			case KindRestart:
				how = "SIGTERM to the leader's leaderrun (restart)"
			case KindZombie:
				how = zombieHow
			}
			ex := medP99(exit)
			if kind == KindRestart || kind == KindZombie {
				ex = "n/a"
			}
			rows = append(rows, []string{be, how, fmt.Sprint(ran), medP99(death), medP99(start), ex,
				fmt.Sprintf("%d/%d", alive, ran), fmt.Sprintf("%d/%d", overlaps, ran)})
		}
	}
	return chaos.Table(stepDownHeader, append(rows, s.Rivals...))
}

// RivalRows are the rivals' graceful handoffs of res (SIGTERM to the
// holder's process: all they offer to move the job), as step-down rows.
func RivalRows(res *Results) [][]string {
	var rows [][]string
	for _, c := range res.Contenders {
		if c.Leaderrun {
			continue
		}
		var death, start chaos.Durations
		alive, overlaps, ran := 0, 0, 0
		for _, t := range res.Trials[c.Name()][KindGraceful] {
			if t.Err != "" {
				continue
			}
			ran++
			if t.Stopped {
				death = append(death, t.Stop)
			}
			if t.Handoff {
				start = append(start, t.Failover)
			}
			if t.OldAlive {
				alive++
			}
			if t.Overlaps > 0 {
				overlaps++
			}
		}
		if ran == 0 {
			continue
		}
		rows = append(rows, []string{c.Backend, "SIGTERM to " + c.Name() + " (its graceful handoff, one standby)", fmt.Sprint(ran),
			fmt.Sprintf("%s (%d/%d died)", medP99(death), len(death), ran), fmt.Sprintf("%s (%d/%d handed off)", medP99(start), len(start), ran),
			"n/a", fmt.Sprintf("%d/%d", alive, ran), fmt.Sprintf("%d/%d", overlaps, ran)})
	}
	return rows
}

// newestFullRun is the newest `make bench` results file
// (bench-DATE-full.md, or -full-N.md for a later run of the day) in the
// folder report names, or beside the file it names; "" when there is none.
func newestFullRun(report string) string {
	dir := report
	if st, err := os.Stat(report); !strings.HasSuffix(report, "/") && (err != nil || !st.IsDir()) {
		dir = filepath.Dir(report)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "bench-*-full*.md"))
	newest := ""
	for _, f := range files {
		// "…-full" before "…-full-2": compare the names without ".md".
		if newest == "" || strings.TrimSuffix(f, ".md") > strings.TrimSuffix(newest, ".md") {
			newest = f
		}
	}
	return newest
}

// rivalRowsFrom copies the rivals' graceful handoffs out of the failover
// table of a `make bench` results file (or of the bench-results section of
// an older doc that has one), when there is one: a step-down run alone has
// no rival trials of its own.
func rivalRowsFrom(report string) (rows [][]string, run string) {
	if report == "" {
		return nil, ""
	}
	b, err := os.ReadFile(report)
	if err != nil {
		return nil, ""
	}
	section := string(b)
	begin, end := strings.Index(section, "<!-- BEGIN bench-results -->"), strings.Index(section, "<!-- END bench-results -->")
	if begin >= 0 && end > begin {
		section = section[begin:end]
	}
	if i := strings.Index(section, "Run on "); i >= 0 {
		run, _, _ = strings.Cut(section[i+len("Run on "):], ";")
	}
	backend := map[string]string{"etcdctl lock": "etcd", "consul lock": "consul", "k8s leaderelection": "kubernetes"}
	inTable := false
	for _, line := range strings.Split(section, "\n") {
		if strings.HasPrefix(line, "| tool | crash failover") {
			inTable = true
			continue
		}
		if !inTable || !strings.HasPrefix(line, "| ") {
			if inTable && !strings.HasPrefix(line, "|") {
				break
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) < 7 {
			continue
		}
		for tool, be := range backend {
			if !strings.HasPrefix(cells[0], tool+" ") {
				continue
			}
			// "median (p95 …, max …); k/n handed off"
			handoff, count, _ := strings.Cut(cells[2], "; ")
			n := "–"
			if _, total, ok := strings.Cut(strings.TrimSuffix(count, " handed off"), "/"); ok {
				n = total
			}
			rows = append(rows, []string{be, "SIGTERM to " + cells[0] + " (its graceful handoff, one standby)", n,
				"–", handoff + "; " + count, "n/a", "–", cells[6] + " of crash and graceful"})
		}
	}
	return rows, run
}

// stepDownNote heads the step-down table in a report.
const stepDownNote = "Moving the job now: one leader and two standbys per backend, each round timed from the moment " +
	"`leaderrun step-down KEY` (or `--to ID`, naming the standby that began to wait last) is invoked, or the SIGTERM is sent, " +
	"to the old child's death, the new child's start on another candidate and the command's exit. " +
	"The rivals cannot step down: SIGTERM to the holder's process (what `systemctl restart` does first) is all they offer, " +
	"and their rows are their graceful handoffs of the failover table. `make bench-stepdown` runs it alone.\n\n"
