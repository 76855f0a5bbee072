//go:build linux

package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/chaos"
	"github.com/leaderrun/leaderrun/tests/fence"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// The breakdown: where the time of one failover goes, from the kill -9 of
// the leader's leaderrun (crash) or its SIGTERM (handoff) to the first
// instruction of the standby's child. Every point but two is a line
// leaderrun or its guard logs (in JSON, whose timestamps have
// microseconds; all processes run on this host, so their clocks agree);
// the standby's wake-up is the first answer its proxies carry to it after
// the release began, and the child's start is the fenced writer's own
// clock reading at the top of its main.

// Step is one point of a failover, in the order a failover passes them.
type Step struct {
	// Name is the point as the table names it.
	Name string
	// Old says the old leader (or its guard) logs it; otherwise the
	// standby does.
	Old bool
	// Module and Message select the log line ("" Message: not a log line).
	Module, Message string
	// From names the step this one's own time is counted from; "" (or a
	// step the trial lacks): the nearest earlier step it has.
	From string
}

// Points a failover passes that no log line marks.
const (
	stepWake    = "standby woken: its first answer from the backend to what it had not asked before the release"
	stepChild   = "new child's first instruction"
	stepRelease = "release sent"
)

// standbySteps are the steps after the release, on either kind.
var standbySteps = []Step{
	// The notification may overtake the release's own answer.
	{Name: stepWake, From: stepRelease},
	{Name: "key won (acquire round trips)", Module: "leaderrun", Message: "won the key; confirming", From: stepWake},
	{Name: "lease confirmed (one renewal)", Module: "leaderrun", Message: "acquired"},
	// The term's sweep runs beside the confirm, the guard's start beside
	// the sweep: each step is what the next one still waited.
	{Name: "guard started (fork/exec)", Module: "leaderrun", Message: "guard started"},
	{Name: "leftovers of the key checked (registry; /proc scans if one is dead), after the guard", Module: "leaderrun", Message: "leftovers swept"},
	{Name: "job's cgroup made", Module: "leaderrun", Message: "job made"},
	{Name: "fork/exec returned", Module: "leaderrun", Message: "child started"},
	{Name: stepChild},
}

// BreakdownSteps are the steps of a failover of kind (KindCrash or
// KindGraceful).
func BreakdownSteps(kind string) []Step {
	var old []Step
	if kind == KindCrash {
		g := "leaderrun.guard"
		old = []Step{
			{Name: "guard saw leaderrun die (its pipe closed)", Old: true, Module: g, Message: "leaderrun died"},
			{Name: "job killed and gone (populated 0)", Old: true, Module: g, Message: "the job is gone"},
			{Name: stepRelease, Old: true, Module: g, Message: "releasing leadership"},
			{Name: "release answered (round trip)", Old: true, Module: g, Message: "released leadership"},
		}
	} else {
		old = []Step{
			{Name: "leaderrun acted on SIGTERM", Old: true, Module: "leaderrun", Message: "stopping child"},
			{Name: "child exited on SIGTERM, job gone (populated 0)", Old: true, Module: "leaderrun", Message: "the job is gone"},
			{Name: stepRelease, Old: true, Module: "leaderrun", Message: "releasing"},
			{Name: "release answered (round trip)", Old: true, Module: "leaderrun", Message: "released"},
		}
	}
	return append(old, standbySteps...)
}

// Breakdown is one failover taken apart.
type Breakdown struct {
	Backend, Kind string
	// At is each step's point, from the kill or SIGTERM, by step name; a
	// step that could not be placed is missing.
	At map[string]time.Duration
	// Total is from the event to the new child's first instruction.
	Total time.Duration
	// Sent counts the chunks the standby sent its backend from its
	// wake-up to the key won: its acquire's requests, roughly.
	Sent int
	Err  string
}

// logLine is what the breakdown reads of a JSON log line.
type logLine struct {
	Message string    `json:"@message"`
	Module  string    `json:"@module"`
	At      time.Time `json:"@timestamp"`
}

// parseLogLines reads the JSON log lines among lines; others are skipped.
func parseLogLines(lines []chaos.Line) []logLine {
	var out []logLine
	for _, l := range lines {
		if !strings.HasPrefix(l.Text, "{") {
			continue
		}
		var ll logLine
		if json.Unmarshal([]byte(l.Text), &ll) == nil && !ll.At.IsZero() {
			out = append(out, ll)
		}
	}
	return out
}

// firstAfter is the first line of module and message at or after from.
func firstAfter(lines []logLine, module, message string, from time.Time) (time.Time, bool) {
	for _, l := range lines {
		if l.Module == module && l.Message == message && !l.At.Before(from) {
			return l.At, true
		}
	}
	return time.Time{}, false
}

// chunk is one chunk a standby's proxy forwarded.
type chunk struct {
	at       fence.Mono
	conn     uint64 // the proxy's and its connection's numbers
	proxy    int
	toClient bool
}

// wakeUp is the standby's wake-up: the first chunk the backend sent it
// from release on that answers nothing it asked before release: on a
// watch, the notification; on a polled backend, the answer to its next
// read. An answer to a request sent before the release (a keepalive, a
// poll in flight) still saw the old holder.
func wakeUp(chunks []chunk, release fence.Mono) (fence.Mono, bool) {
	type key struct {
		proxy int
		conn  uint64
	}
	asked := map[key]bool{} // a request sent before release, unanswered
	for _, ch := range chunks {
		k := key{ch.proxy, ch.conn}
		switch {
		case !ch.toClient:
			asked[k] = ch.at < release
		case ch.at < release || asked[k]:
			asked[k] = false
		default:
			return ch.at, true
		}
	}
	return 0, false
}

// jsonLogs makes the contender's leaderrun log in JSON: its argv gets
// --log-format json before the command.
func jsonLogs(c *Contender) *Contender {
	cc := *c
	argv := c.argv
	cc.argv = func(e *Env, lock, id string, addrs []string) (string, []string) {
		path, args := argv(e, lock, id, addrs)
		if i := slices.Index(args, "--"); i >= 0 {
			args = slices.Insert(slices.Clone(args), i, "--log-format", "json")
		}
		return path, args
	}
	return &cc
}

// Breakdown runs one trial of kind (KindCrash or KindGraceful) in the
// lane and takes it apart.
func (ln *Lane) Breakdown(kind string) Breakdown {
	b := Breakdown{Backend: ln.c.Backend, Kind: kind, At: map[string]time.Duration{}}
	if err := ln.ensureStandby(); err != nil {
		b.Err = err.Error()
		return b
	}
	leader, standby := ln.leader, ln.standby
	old, ok := ln.newest()
	if !ok {
		b.Err = "no child before the trial"
		return b
	}
	var (
		mu     sync.Mutex
		chunks []chunk
	)
	for i, p := range standby.Link.Proxies {
		p.OnChunk(func(conn uint64, toClient bool, _ int) {
			at := fence.Now()
			mu.Lock()
			chunks = append(chunks, chunk{at: at, conn: conn, proxy: i, toClient: toClient})
			mu.Unlock()
		})
	}
	// The two clocks, read back to back: a log line's wall time becomes a
	// point on CLOCK_MONOTONIC, where the writer's start is.
	wall0, mono0 := time.Now(), fence.Now()
	tr := ln.run(kind)
	for _, p := range standby.Link.Proxies {
		p.OnChunk(nil)
	}
	if tr.Err != "" || !tr.Handoff {
		b.Err = fmt.Sprintf("trial: handoff %v %s", tr.Handoff, tr.Err)
		return b
	}
	var next fence.Instance
	for _, in := range ln.fence.Instances()[old.ID+1:] {
		if in.Writer == standby.ID {
			next = in
			break
		}
	}
	if next.Writer == "" {
		b.Err = "the standby's child is not in the fence's log"
		return b
	}
	at := next.Started.Add(-tr.Failover) // the strike
	since := func(w time.Time) time.Duration { return mono0.Add(w.Sub(wall0)).Sub(at) }
	from := wall0.Add(-time.Millisecond)

	// The old guard logs its release after leaderrun died: wait for it.
	steps := BreakdownSteps(kind)
	var oldLines []logLine
	for end := time.Now().Add(3 * time.Second); ; time.Sleep(pollEvery) {
		oldLines = parseLogLines(leader.Proc.Lines())
		if _, ok := firstAfter(oldLines, steps[3].Module, steps[3].Message, from); ok || time.Now().After(end) {
			break
		}
	}
	newLines := parseLogLines(standby.Proc.Lines())
	var releaseAt fence.Mono
	for _, s := range steps {
		switch {
		case s.Name == stepChild:
			b.At[s.Name] = tr.Failover
		case s.Message != "":
			lines := newLines
			if s.Old {
				lines = oldLines
			}
			if w, ok := firstAfter(lines, s.Module, s.Message, from); ok {
				b.At[s.Name] = since(w)
				if s.Name == stepRelease {
					releaseAt = mono0.Add(w.Sub(wall0))
				}
			}
		}
	}
	// The wake-up: the first answer the standby got once the release
	// began; then what it sent until it won the key.
	won, hasWon := b.At[standbySteps[1].Name]
	mu.Lock()
	defer mu.Unlock()
	if w, ok := wakeUp(chunks, releaseAt); ok && releaseAt != 0 {
		b.At[stepWake] = w.Sub(at)
	}
	if wake, ok := b.At[stepWake]; ok && hasWon {
		for _, ch := range chunks {
			if d := ch.at.Sub(at); !ch.toClient && d >= wake && d <= won {
				b.Sent++
			}
		}
	}
	b.Total = tr.Failover
	return b
}

// Breakdowns runs breakdown trials of kind on contender c in one lane
// until n ran (a fresh lane after a trial that could not run, which is
// kept with Err, up to maxLaneErrors of them).
func (e *Env) Breakdowns(c *Contender, kind string, n int) []Breakdown {
	c = jsonLogs(c)
	var out []Breakdown
	var ln *Lane
	defer func() {
		if ln != nil {
			ln.Close()
		}
	}()
	for ok, errs := 0, 0; ok < n && errs < maxLaneErrors; {
		if ln == nil {
			var err error
			if ln, err = e.NewLane(c, false); err == nil {
				err = ln.Start()
			}
			if err != nil {
				errs++
				out = append(out, Breakdown{Backend: c.Backend, Kind: kind, Err: err.Error()})
				if ln != nil {
					ln.Close()
					ln = nil
				}
				continue
			}
		}
		b := ln.Breakdown(kind)
		out = append(out, b)
		if b.Err == "" {
			ok++
			continue
		}
		errs++
		ln.Close()
		ln = nil
	}
	return out
}

// BreakdownSet is every breakdown of a run, by backend, in order.
type BreakdownSet struct {
	Backends []string
	Trials   map[string]map[string][]Breakdown // backend, kind
}

// NewBreakdownSet returns an empty set.
func NewBreakdownSet() *BreakdownSet {
	return &BreakdownSet{Trials: map[string]map[string][]Breakdown{}}
}

// Add records breakdowns.
func (s *BreakdownSet) Add(bs []Breakdown) {
	for _, b := range bs {
		if s.Trials[b.Backend] == nil {
			s.Trials[b.Backend] = map[string][]Breakdown{}
			s.Backends = append(s.Backends, b.Backend)
		}
		s.Trials[b.Backend][b.Kind] = append(s.Trials[b.Backend][b.Kind], b)
	}
}

// Errors lists the breakdown trials that could not run.
func (s *BreakdownSet) Errors() []string {
	var out []string
	for _, be := range s.Backends {
		for kind, bs := range s.Trials[be] {
			for _, b := range bs {
				if b.Err != "" {
					out = append(out, fmt.Sprintf("%s %s: %s", be, kind, firstLine(b.Err)))
				}
			}
		}
	}
	return out
}

// msf formats a duration in milliseconds with one decimal.
func msf(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64)
}

// Table is the breakdown of kind: a row a step, a column a backend. A cell
// is the step's share (the median of its point minus the previous step's,
// trial by trial) and, in brackets, the median of its point from the
// event.
func (s *BreakdownSet) Table(kind string) string {
	steps := BreakdownSteps(kind)
	header := []string{"step (ms: this step [since the " + map[bool]string{true: "kill -9", false: "SIGTERM"}[kind == KindCrash] + "])"}
	var cols [][]Breakdown
	for _, be := range s.Backends {
		var ok []Breakdown
		for _, b := range s.Trials[be][kind] {
			if b.Err == "" {
				ok = append(ok, b)
			}
		}
		if len(ok) == 0 {
			continue
		}
		header = append(header, fmt.Sprintf("%s (%d)", be, len(ok)))
		cols = append(cols, ok)
	}
	var rows [][]string
	for i, st := range steps {
		row := []string{st.Name}
		for _, bs := range cols {
			var share, point chaos.Durations
			for _, b := range bs {
				p, ok := b.At[st.Name]
				if !ok {
					continue
				}
				point = append(point, p)
				prev, ok := b.At[st.From]
				for j := i - 1; j >= 0 && !ok; j-- {
					prev, ok = b.At[steps[j].Name]
				}
				share = append(share, p-prev)
			}
			if len(point) == 0 {
				row = append(row, "–")
				continue
			}
			row = append(row, fmt.Sprintf("%s [%s]", msf(share.Median()), msf(point.Median())))
		}
		rows = append(rows, row)
	}
	total := []string{"total, median (max)"}
	sent := []string{"chunks the standby sent from its wake-up to the key won, median"}
	for _, bs := range cols {
		var tot chaos.Durations
		var n []int
		for _, b := range bs {
			tot = append(tot, b.Total)
			n = append(n, b.Sent)
		}
		slices.Sort(n)
		total = append(total, fmt.Sprintf("%s (%s)", msf(tot.Median()), msf(tot.Max())))
		sent = append(sent, strconv.Itoa(n[len(n)/2]))
	}
	return chaos.Table(header, append(rows, total, sent))
}

// BreakdownContenders are leaderrun on every backend Env has, plus
// DynamoDB (when dyn is set) and the local backend, each with its own
// backend.
func (e *Env) BreakdownContenders(dyn *testcluster.Dynalite) []*Contender {
	var out []*Contender
	for _, c := range Contenders() {
		if c.Leaderrun && e.Has(c) {
			out = append(out, c)
		}
	}
	has := func(be string) bool {
		return slices.ContainsFunc(out, func(c *Contender) bool { return c.Backend == be })
	}
	if dyn != nil && !has("dynamodb") {
		out = append(out, dynamoContender(dyn))
	}
	if !has("local") {
		out = append(out, localContender(filepath.Join(e.Dir, "locks")))
	}
	return out
}

// dynamoTiming is the DynamoDB end-to-end tests' timeline: a 3s TTL with a
// renewal every 500ms.
var dynamoTiming = chaos.Timing{TTL: 3 * time.Second, RenewInterval: 500 * time.Millisecond, KillGrace: time.Second, SafetyMargin: 500 * time.Millisecond}

// dynamoContender is leaderrun on a dynalite server. leaderrun runs
// through env(1), which sets the fake credentials and region and execs it.
func dynamoContender(d *testcluster.Dynalite) *Contender {
	return &Contender{
		Tool: "leaderrun", Config: "(dynamodb, ttl 3s)", Backend: "dynamodb", TTL: dynamoTiming.TTL, Leaderrun: true, NoScale: true,
		backend: dynamoCluster{d},
		argv: func(e *Env, lock, id string, addrs []string) (string, []string) {
			args := append(append(d.Env(), e.Bins.Leaderrun, "--backend", "dynamodb", "--dynamodb-endpoint", "http://"+addrs[0], "--dynamodb-create-table"),
				dynamoTiming.Args()...)
			return "/usr/bin/env", append(args, "--key", lock, "--id", id, "--log-level", "debug", "--", e.Bins.Writer)
		},
	}
}

// localContender is leaderrun on the local backend, its lock files in dir.
// A candidate counts as waiting once it has the lock file open.
func localContender(dir string) *Contender {
	return &Contender{
		Tool: "leaderrun", Config: "(local, ttl 3s)", Backend: "local", TTL: chaos.LocalTiming.TTL, Leaderrun: true, NoScale: true,
		backend: chaos.Local{},
		argv: func(e *Env, lock, id string, _ []string) (string, []string) {
			args := append([]string{"--backend", "local", "--lock-dir", dir, "--state-dir", dir}, chaos.LocalTiming.Args()...)
			return e.Bins.Leaderrun, append(args, "--key", lock, "--id", id, "--log-level", "debug", "--", e.Bins.Writer)
		},
		members: func(e *Env, lock string) ([]string, error) { return openers(e, dir, lock+".lock"), nil },
	}
}

// openers are the pids of the leaderrun processes that have a file named
// name open under dir (leaderrun keeps a key's lock file in a directory of
// its own there).
func openers(e *Env, dir, name string) []string {
	var out []string
	for _, p := range chaos.Scan(e.Bins.Leaderrun) {
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.Pid))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if t, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", p.Pid, fd.Name())); err == nil && strings.HasPrefix(t, dir+"/") && filepath.Base(t) == name {
				out = append(out, strconv.Itoa(p.Pid))
				break
			}
		}
	}
	return out
}

// dynamoCluster is a dynalite server as a chaos.Cluster: one server every
// candidate reaches through a proxy of its own.
type dynamoCluster struct{ d *testcluster.Dynalite }

func (dynamoCluster) Name() string                    { return "dynamodb" }
func (dynamoCluster) Servers() int                    { return 1 }
func (c dynamoCluster) ServerAddr(int) string         { return c.d.Addr() }
func (dynamoCluster) Protocol() chaos.Protocol        { return chaos.HTTP1 }
func (c dynamoCluster) Kill(int)                      { c.d.Kill() }
func (dynamoCluster) Restart(int)                     {}
func (dynamoCluster) WaitHealthy(testing.TB)          {}
func (dynamoCluster) Timing() chaos.Timing            { return dynamoTiming }
func (dynamoCluster) HostServers(int) []int           { return []int{0} }
func (dynamoCluster) LeaderrunArgs([]string) []string { return nil }

// Report is the breakdown tables of a results file (make bench, make
// bench-breakdown).
func (s *BreakdownSet) Report() string {
	var b strings.Builder
	b.WriteString("#### Crash: kill -9 of the leader's leaderrun\n\n" + s.Table(KindCrash))
	b.WriteString("\n#### Handoff: SIGTERM to the leader's leaderrun\n\n" + s.Table(KindGraceful))
	return b.String()
}

// breakdownTrials is how many breakdowns of each kind make bench runs per
// backend.
const breakdownTrials = 5

// breakdownNote heads the breakdown tables in a report.
const breakdownNote = "One failover of leaderrun per backend taken apart, the median of the trials: a cell is the step's own time " +
	"and, in brackets, its point from the kill -9 or SIGTERM (a step's own time is the median of its trials' differences, so the column " +
	"does not add up to the total exactly). `make bench-breakdown` runs it alone; \"The failover path, step by step\" below says how each point is placed.\n\n"

// ratioNote heads the summary table.
const ratioNote = "leaderrun's figure divided by the best rival configuration's on the same backend in this run, each figure's best " +
	"on its own (below 1: leaderrun is faster or smaller), then both figures and the rival; backends without a rival are left out.\n\n"
