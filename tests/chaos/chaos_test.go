package chaos

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/fence"
)

var (
	flagFaults   = flag.Int("chaos.faults", 0, "faults per backend; 0 runs the short default set (a few minutes)")
	flagSeed     = flag.Uint64("chaos.seed", 0, "seed of the fault order and choices; 0 takes one from the clock")
	flagBackends = flag.String("chaos.backends", "etcd,consul,zookeeper,kubernetes,postgres,dynamodb,local", "comma-separated backends to torment")
	flagOnly     = flag.String("chaos.only", "", "comma-separated fault types to inject (default: all)")
	flagContain  = flag.String("chaos.contain", "cgroup,group", "comma-separated --contain modes the hosts take turns with, in blocks of faults (cgroup, group, auto)")
	flagReport   = flag.String("chaos.report", "", "results file to write whole, or a folder (docs/results/) that receives a new chaos-DATE-BACKENDS.md")
	flagIndex    = flag.String("chaos.index", "", "method doc whose Results list gets the run's line (docs/CHAOS.md)")
	flagCommand  = flag.String("chaos.command", "", "the command line to quote in the report")
	flagLogs     = flag.String("chaos.logs", "", "folder that receives every host's leaderrun log (backend-host.log) when the run ends")
)

// bins are the binaries built for this test process.
var bins Binaries

// startCommit is the tree TestChaos started from.
var startCommit string

func TestMain(m *testing.M) { os.Exit(RunTests(m, &bins)) }

// shortPlan is what the default `go test ./...` runs per backend, each
// fault as fault@contain-mode (auto: a cgroup where the machine gives one,
// so that the short run passes where none can be had): on etcd, whose 3s
// lease makes each one quick, every fault but the last three of the list
// once, the escape in group mode; on Consul, whose minimum session TTL is
// 10s, the faults that do not wait for a session to expire, and one that
// does; on ZooKeeper, Kubernetes, PostgreSQL and DynamoDB a crash, a frozen supervisor, a
// partition and a server's death, the faults that go through the guard,
// the kill point and the observer's clock; on the local backend, where
// nothing waits for a lease, the three faults of the job's last line of
// defence in group mode, the escape in auto mode, and a crash. etcd adds
// a step-down --to and a pause, the local backend a step-down, a step-down
// --to and a pause (the control faults, control_test.go; without
// priorities, which only -chaos.control gives the hosts). etcd,
// PostgreSQL and the local backend each take one operator's hand edit of
// the leader's record (handedit_test.go).
var shortPlan = map[string][]string{
	"etcd": {"kill-leader@auto", "kill-child@auto", "freeze-leaderrun@auto", "freeze-host@auto", "kill-server@auto",
		"lose-quorum@auto", "partition@auto", "silent-server@auto", "restart-backend@auto", "escape@group",
		"step-down-to@auto", "pause@auto", "hand-edit@auto"},
	"consul":     {"kill-leader@auto", "kill-child@auto", "freeze-host@auto", "partition@auto", "kill-server@auto"},
	"zookeeper":  {"kill-leader@auto", "freeze-leaderrun@auto", "partition@auto", "kill-server@auto"},
	"kubernetes": {"kill-leader@auto", "freeze-leaderrun@auto", "partition@auto", "kill-server@auto"},
	"postgres":   {"kill-leader@auto", "freeze-leaderrun@auto", "partition@auto", "kill-server@auto", "hand-edit@auto"},
	"dynamodb":   {"kill-leader@auto", "freeze-leaderrun@auto", "partition@auto", "kill-server@auto"},
	"local": {"kill-leader@auto", "escape@auto", "guard-fires-first@group", "both-killed@group", "fork-storm@group",
		"step-down@auto", "step-down-to@auto", "pause@auto", "hand-edit@auto"},
}

// planned is one fault of a plan and the containment mode the hosts run
// with for it.
type planned struct {
	fault
	contain string
}

// modeBlock is how many consecutive faults of a long run share a
// containment mode: switching modes restarts every host.
const modeBlock = 10

// backendRun is one backend's results.
type backendRun struct {
	name  string
	tm    Timing
	stats map[string]*faultStats
	ctl   map[string]*ctlCount
	took  time.Duration
}

// TestChaos injects faults into real clusters while three leaderrun hosts
// compete for one key and their children write to a fenced resource, and
// checks after every fault that no two children's writes overlapped, that
// epochs never went down, that every stale write was rejected, and that no
// process was left behind. The short default run takes a few minutes;
// `make chaos` runs hundreds of faults and writes a results file under
// docs/results/, listed in docs/CHAOS.md.
func TestChaos(t *testing.T) {
	startCommit = Commit() // the tree as built, before the long run
	seed := *flagSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("chaos seed %d (rerun with -chaos.seed=%d)", seed, seed)
	if *flagHolders > 1 {
		testHolders(t, seed)
		return
	}
	var runs []*backendRun
	// The backends run side by side, each with its own cluster, hosts,
	// fence and copies of the binaries; the group returns when all are
	// done.
	t.Run("backends", func(t *testing.T) {
		for _, name := range strings.Split(*flagBackends, ",") {
			r := &backendRun{name: strings.TrimSpace(name)}
			runs = append(runs, r) // reported even if the run stops early
			t.Run(r.name, func(t *testing.T) {
				t.Parallel()
				runBackend(t, r, seed)
			})
		}
	})
	table := summary(runs)
	t.Logf("chaos summary (seed %d):\n%s", seed, table)
	if *flagReport != "" {
		desc := backendsDesc()
		if controlling() {
			desc = "control-" + desc // CHAOS_CONTROL
		}
		writeRun(t, desc, report(runs, seed, table, t.Failed()))
	}
}

// allBackends are the backends `make chaos` runs by default, which a
// results file's name calls "all".
const allBackends = "etcd,consul,zookeeper,kubernetes,postgres,dynamodb,local"

// backendsDesc names the run's backends for its results file.
func backendsDesc() string {
	names := strings.Split(*flagBackends, ",")
	for i := range names {
		names[i] = strings.TrimSpace(names[i])
	}
	all := strings.Split(allBackends, ",")
	if len(names) == len(all) && !slices.ContainsFunc(all, func(b string) bool { return !slices.Contains(names, b) }) {
		return "all"
	}
	return strings.Join(names, "-")
}

// writeRun writes the run's results file under -chaos.report and its line
// in -chaos.index's Results list (docs/CHAOS.md).
func writeRun(t *testing.T, desc, body string) {
	faults := "the short run"
	if *flagFaults > 0 {
		faults = fmt.Sprintf("%d faults each", *flagFaults)
	}
	what := strings.ReplaceAll(*flagBackends, ",", ", ")
	if *flagHolders > 1 {
		what = fmt.Sprintf("holders mode (--holders %d), %s", *flagHolders, what)
	} else if controlling() {
		what = fmt.Sprintf("control faults (CHAOS_CONTROL=%d), %s", *flagControl, what)
	}
	outcome := "passed"
	if t.Failed() {
		outcome = "FAILED"
	}
	now := time.Now()
	file, err := WriteRun(Run{Path: *flagReport, Index: *flagIndex, List: "chaos-runs", Kind: "chaos", Desc: desc, When: now,
		Title: fmt.Sprintf("Chaos run, %s: %s, %s", now.UTC().Format("2006-01-02"), what, faults),
		Tree:  startCommit, Summary: fmt.Sprintf("%s, %s; %s", what, faults, outcome), Body: body})
	if err != nil {
		t.Errorf("write report: %v", err)
		return
	}
	t.Logf("results written to %s", file)
}

func runBackend(t *testing.T, r *backendRun, seed uint64) {
	start := time.Now()
	defer func() { r.took = time.Since(start) }()
	name := r.name
	var cl Cluster
	switch name {
	case "etcd":
		cl = StartEtcd(t, 3)
	case "consul":
		cl = StartConsul(t, 3)
	case "zookeeper":
		cl = StartZooKeeper(t, 3)
	case "kubernetes":
		cl = StartKube(t)
	case "postgres":
		cl = StartPostgres(t)
	case "dynamodb":
		cl = StartDynamoDB(t)
	case "local":
		cl = StartLocal(t)
	default:
		t.Fatalf("unknown backend %q (want etcd, consul, zookeeper, kubernetes, postgres, dynamodb or local)", name)
	}
	w := newWorld(t, cl, seed)
	r.tm, r.stats, r.ctl = w.tm, w.stats, w.ctl
	plan := w.plan(*flagFaults)
	var names []string
	for _, f := range plan {
		names = append(names, f.name+"@"+f.contain)
	}
	t.Logf("%s: %d faults in this order: %s", name, len(plan), strings.Join(names, " "))
	w.ensureHosts()
	w.waitStable(0, 0, w.stableTimeout())
	for i, f := range plan {
		w.run(i, len(plan), f)
	}
	w.shutdown()
}

// plan is the seeded order of faults: the short set, shuffled, or n faults
// with every type equally often in every containment mode of
// -chaos.contain: shuffled per mode, then the modes take turns in blocks of
// modeBlock faults.
func (w *world) plan(n int) []planned {
	var out []planned
	if n <= 0 {
		for _, entry := range shortPlan[w.cl.Name()] {
			name, mode, _ := strings.Cut(entry, "@")
			f, ok := faultByName(name)
			if !ok {
				w.t.Fatalf("short plan: no fault %q", name)
			}
			out = append(out, planned{f, mode})
		}
		w.rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
		return out
	}
	var kinds []fault
	only := strings.Split(*flagOnly, ",")
	for _, f := range faults {
		if !f.applies(w.cl.Name()) || *flagOnly != "" && !slices.Contains(only, f.name) {
			continue
		}
		weight := 1
		if f.control && *flagOnly == "" {
			weight = *flagControl // 0: none
		}
		for range weight {
			kinds = append(kinds, f)
		}
	}
	if len(kinds) == 0 {
		w.t.Fatalf("no fault type of %q applies to %s", *flagOnly, w.cl.Name())
	}
	modes := strings.Split(*flagContain, ",")
	perMode := make([][]planned, len(modes))
	for i := 0; i < n; i++ {
		m := i % len(modes)
		perMode[m] = append(perMode[m], planned{kinds[(i/len(modes))%len(kinds)], strings.TrimSpace(modes[m])})
	}
	for _, p := range perMode {
		w.rng.Shuffle(len(p), func(i, j int) { p[i], p[j] = p[j], p[i] })
	}
	for len(out) < n {
		for m := range perMode {
			k := min(modeBlock, len(perMode[m]))
			out = append(out, perMode[m][:k]...)
			perMode[m] = perMode[m][k:]
		}
	}
	return out
}

// statsKey names the results of one fault type in one containment mode.
func statsKey(fault, contain string) string { return fault + "@" + contain }

// stableTimeout bounds the wait for a leader after a fault: Consul may need
// twice its TTL to expire a session, and again after a Raft leader change.
func (w *world) stableTimeout() time.Duration { return 6*w.tm.TTL + 30*time.Second }

// standbyAge is how long every host's leaderrun has run before a fault
// strikes, so that standbys are campaigning rather than starting up.
const standbyAge = time.Second

// run injects one fault and checks everything the record shows.
func (w *world) run(i, n int, f planned) {
	t := w.t
	t.Helper()
	w.setProfile(f.profile(f.contain))
	w.ensureHosts()
	h, in := w.waitStable(0, 0, w.stableTimeout())
	w.waitStandbys()
	// Strike at a random point of the leader's renewal cycle, so that
	// over many runs faults hit every phase of it, a renewal in flight
	// included.
	time.Sleep(time.Duration(w.rng.Int64N(int64(w.tm.RenewInterval))))
	h, in = w.waitStable(0, 0, w.stableTimeout())

	out := f.inject(w, h, in)
	healed := fence.Now()
	nh, nin := w.waitStable(healed, w.tm.RenewInterval+time.Second, w.stableTimeout())
	// Nothing of an earlier job may run while the new leader's child does.
	early := w.earlierJobs(nin)
	res := w.check.Feed(w.fence.Log(w.fed))
	w.fed += res.Writes

	st := w.stats[statsKey(f.name, f.contain)]
	if st == nil {
		st = &faultStats{}
		w.stats[statsKey(f.name, f.contain)] = st
	}
	st.runs++
	if nin.ID == in.ID {
		st.kept++
	}
	if next, ok := w.nextChild(in, out.at); ok {
		st.failover = append(st.failover, next.Sub(out.at))
	}
	st.gaps = append(st.gaps, res.MaxGap)
	st.stale += res.Stale
	st.staleAccepted += res.StaleAccepted
	st.regressions += res.Regressions
	st.overlaps += len(res.Overlaps)
	failed := t.Failed()

	// (a) the resource never saw two leaders' writes interleave.
	for _, o := range res.Overlaps {
		t.Errorf("%s: accepted writes overlap: %v", f.name, o)
	}
	// (b) accepted epochs never decrease; one epoch, one leadership.
	if res.Regressions > 0 || len(res.SharedEpochs) > 0 {
		t.Errorf("%s: %d accepted writes with a lower epoch; shared epochs %v", f.name, res.Regressions, res.SharedEpochs)
	}
	// (c) every stale write was rejected.
	if res.StaleAccepted > 0 {
		t.Errorf("%s: %d stale writes accepted", f.name, res.StaleAccepted)
	}
	// Two children alive at once: only a frozen host's child, waking up,
	// may write next to the new one, and the fence turned it away (c).
	two := len(res.LiveOverlaps)
	for _, s := range res.Started {
		if s.PrevAlive() {
			two++
			if !f.twoAlive {
				t.Errorf("%s: child %s started while the previous child %d still ran (state %s)", f.name, s.Name(), s.Prev, s.PrevState)
			}
		}
	}
	if !f.twoAlive {
		for _, o := range res.LiveOverlaps {
			t.Errorf("%s: two children ran at once: %v", f.name, o)
		}
	}
	if two > 0 {
		st.twoAlive++
	}
	// The child is dead before its lease could pass to another host.
	if out.stopped {
		st.stopAfter = append(st.stopAfter, out.stopAfter)
		if out.stopAfter >= w.tm.TTL {
			t.Errorf("%s: the old child died %v after the fault, not before the %v lease could expire", f.name, out.stopAfter, w.tm.TTL)
		}
	}
	if out.resumed {
		st.resumeLag = append(st.resumeLag, out.resumeLag)
		if out.resumeLag < w.prof.timing(w.tm).SafetyMargin {
			st.inDeadline++
		}
	}
	// (e) nothing left behind: no process of an earlier job while the new
	// leader's child ran, and nothing but the hosts, the leader's guard and
	// its job a little later.
	for _, p := range early {
		t.Errorf("%s: a process of an earlier job runs beside the child of epoch %d: %v", f.name, nin.Epoch, p)
	}
	if len(early) > 0 {
		// Leftovers, reported: gone before the next fault, whatever they are.
		killUntilGone(func() []Process { return w.earlierJobs(nin) })
	}
	if !w.checkStrays() || len(early) > 0 {
		st.leftovers++
	}
	if t.Failed() && !failed {
		st.failed++
	}
	t.Logf("run %d/%d %-17s %-6s leader %s (epoch %d) -> %s (epoch %d); longest gap %v; stale writes %d; child stopped after %v%s",
		i+1, n, f.name, f.contain, h.id, in.Epoch, nh.id, nin.Epoch, res.MaxGap.Round(time.Millisecond), res.Stale, out.stopAfter.Round(time.Millisecond), out.note())
}

// note is what the outcome adds to the run's log line.
func (o outcome) note() string {
	s := ""
	if o.how != "" {
		s += "; by " + o.how
	}
	if o.resumed {
		s += fmt.Sprintf("; supervisor resumed %v after the guard's kill", o.resumeLag.Round(time.Millisecond))
	}
	return s
}

// earlierJobs lists the writer's processes (writers, launchers, relays)
// that are not of the job of the leader's child in: a process of an earlier
// job, alive while a later leadership's child writes.
func (w *world) earlierJobs(in fence.Instance) []Process {
	mark := JobMarker(in.Pid)
	if mark == "" {
		return nil // the child is gone already: the next run will tell
	}
	var out, unread []Process
	for _, p := range Scan(w.bins.Writer) {
		m, alive := markerOf(p.Pid)
		switch {
		case !alive || p.Pid == in.Pid || m == mark:
		case m == "":
			unread = append(unread, p)
		default:
			out = append(out, p)
		}
	}
	if len(unread) == 0 {
		return out
	}
	// A process whose environment cannot be read is one exiting (its
	// memory, environment and command line gone already: a relay of the
	// new job's own storm, a process just killed) or one not yet
	// readable: only one still there, and still without a marker, a
	// moment later counts.
	time.Sleep(200 * time.Millisecond)
	for _, p := range unread {
		if m, alive := markerOf(p.Pid); alive && m != mark {
			exe, _ := os.Readlink("/proc/" + strconv.Itoa(p.Pid) + "/exe")
			if st, ok := Stat(p.Pid); ok && st.State != "Z" && st.State != "X" && hasCmdline(p.Pid) && strings.TrimSuffix(exe, " (deleted)") == p.Exe {
				out = append(out, p)
			}
		}
	}
	return out
}

// hasCmdline reports whether pid's command line can be read and is not
// empty: a process past the release of its memory, on its way out, has
// none.
func hasCmdline(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return err == nil && len(b) > 0
}

// waitStandbys waits until every host's leaderrun has run for standbyAge.
func (w *world) waitStandbys() {
	deadline := time.Now().Add(standbyAge + 5*time.Second)
	for _, h := range w.hosts {
		for time.Since(h.started) < standbyAge && time.Now().Before(deadline) {
			time.Sleep(pollEvery)
		}
	}
}

// contains are the containment modes in report order.
var contains = []string{"cgroup", "group", "auto"}

// summary renders the results table: one row per backend, fault and
// containment mode, and a total per backend.
func summary(runs []*backendRun) string {
	header := []string{"backend", "fault", "contain", "runs", "overlapping accepted writes", "two children alive", "leftovers",
		"stale writes rejected / accepted", "leaderless gap median", "leaderless gap max", "child stopped after fault (max) / TTL",
		"leader kept its child", "fault → next leader's child, median / max"}
	var rows [][]string
	for _, r := range runs {
		if r.stats == nil {
			continue
		}
		total := faultStats{}
		for _, f := range faults {
			for _, mode := range contains {
				st := r.stats[statsKey(f.name, mode)]
				if st == nil {
					continue
				}
				stop := "–"
				if len(st.stopAfter) > 0 {
					stop = Ms(st.stopAfter.Max()) + " / " + r.tm.TTL.String()
				}
				failover := "–"
				if len(st.failover) > 0 {
					failover = Ms(st.failover.Median()) + " / " + Ms(st.failover.Max())
				}
				rows = append(rows, []string{r.name, f.name, mode, strconv.Itoa(st.runs), strconv.Itoa(st.overlaps), strconv.Itoa(st.twoAlive),
					strconv.Itoa(st.leftovers), fmt.Sprintf("%d / %d", st.stale-st.staleAccepted, st.staleAccepted),
					Ms(st.gaps.Median()), Ms(st.gaps.Max()), stop, fmt.Sprintf("%d/%d", st.kept, st.runs), failover})
				total.runs += st.runs
				total.overlaps += st.overlaps
				total.twoAlive += st.twoAlive
				total.leftovers += st.leftovers
				total.stale += st.stale
				total.staleAccepted += st.staleAccepted
				total.gaps = append(total.gaps, st.gaps...)
			}
		}
		rows = append(rows, []string{"**" + r.name + "**", "**all**", "", strconv.Itoa(total.runs), strconv.Itoa(total.overlaps), strconv.Itoa(total.twoAlive),
			strconv.Itoa(total.leftovers), fmt.Sprintf("%d / %d", total.stale-total.staleAccepted, total.staleAccepted),
			Ms(total.gaps.Median()), Ms(total.gaps.Max()), "", "", ""})
	}
	return Table(header, rows) + resumeNotes(runs) + controlNotes(runs)
}

// resumeNotes says, for guard-fires-first, how soon after the guard's kill
// the supervisor ran again, and how often that was before its own deadline
// (within the safety margin).
func resumeNotes(runs []*backendRun) string {
	var b strings.Builder
	for _, r := range runs {
		for _, mode := range contains {
			st := r.stats[statsKey("guard-fires-first", mode)]
			if st == nil || len(st.resumeLag) == 0 {
				continue
			}
			fmt.Fprintf(&b, "\n- %s, guard-fires-first, %s: the supervisor resumed %s (median) / %s (max) after its guard's kill, before its own deadline in %d of %d runs",
				r.name, mode, Ms(st.resumeLag.Median()), Ms(st.resumeLag.Max()), st.inDeadline, len(st.resumeLag))
		}
	}
	if b.Len() == 0 {
		return ""
	}
	return b.String() + "\n"
}

// report is the body of a run's results file (docs/results/chaos-*.md).
func report(runs []*backendRun, seed uint64, table string, failed bool) string {
	commit := startCommit
	var b strings.Builder
	cmd := *flagCommand
	if cmd == "" {
		cmd = "go test ./tests/chaos -run TestChaos -v " + strings.Join(os.Args[1:], " ")
	}
	fmt.Fprintf(&b, "Run on %s.\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&b, "- command: `%s`\n", cmd)
	fmt.Fprintf(&b, "- seed: `%d` (reproduce the fault order with `-chaos.seed=%d`)\n", seed, seed)
	fmt.Fprintf(&b, "- tree: %s\n", commit)
	fmt.Fprintf(&b, "- machine: %s; %s\n", Machine(), goVersion())
	for _, r := range runs {
		if r.stats == nil {
			continue
		}
		servers := "3 servers"
		if r.name == "local" {
			servers = "one lock directory"
		} else if r.name == "kubernetes" {
			servers = "1 API server"
		} else if r.name == "postgres" {
			servers = "1 server (a single primary)"
		} else if r.name == "dynamodb" {
			servers = "1 dynalite server (tables on disk)"
		}
		fmt.Fprintf(&b, "- %s: %s, 3 leaderrun hosts; leaderrun %s (guard-fires-first: %s --restart on-failure); took %v\n", r.name, servers,
			strings.Join(r.tm.Args(), " "), strings.Join(profile{guardFirst: true}.timing(r.tm).Args(), " "), r.took.Round(time.Second))
	}
	if *flagFaults > 0 {
		fmt.Fprintf(&b, "- containment: the hosts take turns with `--contain` %s, %d faults at a time\n", *flagContain, modeBlock)
	}
	if failed {
		b.WriteString("- **the run FAILED**: see the test output for the violated checks\n")
	}
	b.WriteString("\n" + table)
	return b.String()
}

// goVersion is the Go toolchain that built the binaries.
func goVersion() string {
	out, err := exec.Command("go", "version").Output()
	if err != nil {
		return "go version unknown"
	}
	return strings.TrimSpace(string(out))
}
