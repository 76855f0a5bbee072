//go:build linux

package chaos

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/fence"
)

var flagHolders = flag.Int("chaos.holders", 1, "every host runs with --holders N; above 1 the suite runs the holders mode (one fence per slot, N+2 hosts)")

// The holders mode (-chaos.holders=N, N > 1): N+2 hosts campaign for one
// key with --holders N, so that two candidates always wait. Each slot has
// its own fenced resource; a child writes to the fence of its LEADER_SLOT
// (FENCE_ADDR_<slot>, read by the writer). After every fault the suite
// checks, per slot, that no two children's accepted writes interleaved,
// that the accepted epochs strictly increase and no stale write got
// through; and, from a /proc watch kept up during the whole run, that never
// more than N children were alive at once, nor two of one slot.

// holderFault is one fault of the holders mode; it strikes one holder.
type holderFault struct {
	name, doc string
	remote    bool
	inject    func(w *hworld, h *host, slot int, in fence.Instance) fence.Mono
}

var holderFaults = []holderFault{
	{name: "kill-holder", doc: "`kill -9` of a random holder's leaderrun", inject: hKillHolder},
	{name: "kill-child", doc: "`kill -9` of a random holder's child", inject: hKillChild},
	{name: "freeze-leaderrun", doc: "SIGSTOP of a random holder's leaderrun until another host holds its slot (at least the TTL), then SIGCONT", inject: hFreeze},
	{name: "partition", doc: "a random holder's proxies cut (refuse or blackhole) until another host holds its slot (at least the TTL), then healed", remote: true, inject: hPartition},
	{name: "kill-server", doc: "`kill -9` of one backend server, restarted after TTL + 1s", remote: true, inject: hKillServer},
	{name: "mixed-n", doc: "two candidates with --holders N-1 and N+1 start beside the N-slot hosts as a random holder's leaderrun is killed (`kill -9`): both must be refused (125) while any slot is held, and never more than N children run", inject: hMixedN},
}

// holderStats are the results of one fault type in the holders mode.
type holderStats struct {
	runs, overlaps, regressions, stale, staleAccepted, kept int
	failover                                                Durations // fault → the next child of the struck slot
	failed                                                  int
}

// hworld is one backend under chaos in the holders mode.
type hworld struct {
	t      *testing.T
	bins   Binaries
	cl     Cluster
	tm     Timing
	n      int
	dir    string
	fences []*fence.Server
	checks []*fence.Checker
	fed    []int
	hosts  []*host
	rng    *rand.Rand
	stats  map[string]*holderStats
	watch  *aliveWatch
}

// holdersRun is one backend's results in the holders mode.
type holdersRun struct {
	name     string
	tm       Timing
	stats    map[string]*holderStats
	maxAlive int // most children alive at once
	maxSlot  int // most children of one slot alive at once
	samples  int
	took     time.Duration
}

// testHolders is TestChaos under -chaos.holders=N.
func testHolders(t *testing.T, seed uint64) {
	var runs []*holdersRun
	t.Run("backends", func(t *testing.T) {
		for _, name := range strings.Split(*flagBackends, ",") {
			r := &holdersRun{name: strings.TrimSpace(name)}
			runs = append(runs, r)
			t.Run(r.name, func(t *testing.T) {
				t.Parallel()
				runHolders(t, r, *flagHolders, *flagFaults, seed)
			})
		}
	})
	table := holdersSummary(runs)
	t.Logf("chaos --holders %d summary (seed %d):\n%s", *flagHolders, seed, table)
	if *flagReport != "" {
		writeRun(t, fmt.Sprintf("holders-%d-%s", *flagHolders, backendsDesc()), holdersReport(runs, seed, table, t.Failed()))
	}
}

func startCluster(t *testing.T, name string) Cluster {
	switch name {
	case "etcd":
		return StartEtcd(t, 3)
	case "consul":
		return StartConsul(t, 3)
	case "zookeeper":
		return StartZooKeeper(t, 3)
	case "kubernetes":
		return StartKube(t)
	case "postgres":
		return StartPostgres(t)
	case "dynamodb":
		return StartDynamoDB(t)
	case "local":
		return StartLocal(t)
	}
	t.Fatalf("unknown backend %q (want etcd, consul, zookeeper, kubernetes, postgres, dynamodb or local)", name)
	return nil
}

// TestChaosHoldersSmoke is the holders mode's short run, in the default
// test run: on the local backend, five hosts with --holders 3, each fault
// that applies there once (about 15s).
func TestChaosHoldersSmoke(t *testing.T) {
	if *flagFaults > 0 || *flagHolders > 1 {
		t.Skip("the long runs go through TestChaos -chaos.holders=N")
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := &holdersRun{name: "local"}
	runHolders(t, r, 3, 0, seed)
	t.Logf("\n%s", holdersSummary([]*holdersRun{r}))
	if st := r.stats["kill-holder"]; st == nil || len(st.failover) != 1 {
		t.Errorf("kill-holder: the struck slot got no new child: %+v", st)
	}
}

func runHolders(t *testing.T, r *holdersRun, holders, faults int, seed uint64) {
	start := time.Now()
	defer func() { r.took = time.Since(start) }()
	cl := startCluster(t, r.name)
	w := newHWorld(t, cl, holders, seed)
	r.tm, r.stats = w.tm, w.stats
	defer func() { r.maxAlive, r.maxSlot, r.samples = w.watch.result() }() // also when a check stops the run
	var kinds []holderFault
	only := strings.Split(*flagOnly, ",")
	for _, f := range holderFaults {
		if (!f.remote || cl.Name() != "local") && (*flagOnly == "" || listed(only, f.name)) {
			kinds = append(kinds, f)
		}
	}
	if len(kinds) == 0 {
		t.Fatalf("no holders fault of %q applies to %s", *flagOnly, cl.Name())
	}
	n := faults
	if n <= 0 {
		n = len(kinds) // the short run: each once
	}
	plan := make([]holderFault, n)
	for i := range plan {
		plan[i] = kinds[i%len(kinds)]
	}
	w.rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	w.ensureHosts()
	w.waitFull(0, 0, w.stableTimeout())
	for i, f := range plan {
		w.run(i, len(plan), f)
	}
	w.stopHosts()
	w.watch.stop()
	r.maxAlive, r.maxSlot, r.samples = w.watch.result()
	if r.maxAlive > w.n || r.maxSlot > 1 {
		t.Errorf("the /proc watch saw %d children alive at once (at most %d allowed) and %d of one slot (1 allowed): %s",
			r.maxAlive, w.n, r.maxSlot, w.watch.worst)
	}
	w.waitNoneLeft()
}

// listed reports whether s is one of list's comma-separated names.
func listed(list []string, s string) bool {
	for _, x := range list {
		if strings.TrimSpace(x) == s {
			return true
		}
	}
	return false
}

func newHWorld(t *testing.T, cl Cluster, n int, seed uint64) *hworld {
	t.Helper()
	dir := t.TempDir()
	own, err := bins.CopyTo(dir)
	if err != nil {
		t.Fatal(err)
	}
	w := &hworld{t: t, bins: own, cl: cl, tm: cl.Timing(), n: n, dir: dir,
		rng:   rand.New(rand.NewPCG(seed, uint64(len(cl.Name())))),
		stats: map[string]*holderStats{}}
	for s := 0; s < n; s++ {
		f, err := fence.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		w.fences = append(w.fences, f)
		w.checks = append(w.checks, fence.NewChecker())
		w.fed = append(w.fed, 0)
	}
	for i := 0; i < n+2; i++ {
		l, err := NewLink(cl, i)
		if err != nil {
			t.Fatal(err)
		}
		w.hosts = append(w.hosts, &host{id: fmt.Sprintf("%s-h%d", cl.Name(), i), n: i, link: l})
	}
	w.watch = watchAlive(own.Writer)
	t.Cleanup(func() {
		for _, f := range w.fences {
			f.Close()
		}
		for _, h := range w.hosts {
			h.link.Close()
		}
	})
	t.Cleanup(func() {
		w.watch.stop()
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

func (w *hworld) stableTimeout() time.Duration   { return 6*w.tm.TTL + 30*time.Second }
func (w *hworld) takeoverTimeout() time.Duration { return 4*w.tm.TTL + 20*time.Second }

// start runs a new leaderrun on h, with --holders N.
func (w *hworld) start(h *host) {
	w.t.Helper()
	h.proc, h.started = w.startN(h, w.n), time.Now()
}

// startN runs a leaderrun on h's link with --holders n.
func (w *hworld) startN(h *host, n int) *Proc {
	w.t.Helper()
	args := append(w.cl.LeaderrunArgs(h.link.Addrs()), w.tm.Args()...)
	args = append(args, "--contain", "auto", "--holders", strconv.Itoa(n),
		"--key", key, "--id", h.id, "--log-level", "debug", "--", w.bins.Writer)
	env := append(w.fences[0].Env(h.id), HostEnv(w.cl)...)
	for s, f := range w.fences {
		env = append(env, "FENCE_ADDR_"+strconv.Itoa(s)+"="+f.Addr())
	}
	p, err := Start(ProcSpec{Name: h.id, Path: w.bins.Leaderrun, Args: args, Env: env,
		LogPath: filepath.Join(w.dir, h.id+".log")})
	if err != nil {
		w.t.Fatal(err)
	}
	return p
}

// ensureHosts restarts every host whose leaderrun exited 123 or 137.
func (w *hworld) ensureHosts() {
	w.t.Helper()
	restartExited(w.t, w.hosts, w.start)
}

func (w *hworld) host(id string) *host {
	for _, h := range w.hosts {
		if h.id == id {
			return h
		}
	}
	return nil
}

// holder is slot s's host and child when the picture is clear: a fresh
// accepted write on the slot's fence from a connected child of a live,
// unfrozen, uncut host.
func (w *hworld) holder(s int) (*host, fence.Instance, bool) {
	wr, in, ok := w.fences[s].LastAccepted()
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

// waitFull waits until every slot's child has written steadily for settle
// since since (or since it started, if later).
func (w *hworld) waitFull(since fence.Mono, settle, timeout time.Duration) {
	w.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		// A fault can end several holders' terms at once (a server's
		// death): hosts that exited campaign again, or the slots they
		// held would stay empty with fewer candidates than slots.
		w.ensureHosts()
		full := true
		for s := range w.fences {
			_, in, ok := w.holder(s)
			if !ok || fence.Now().Sub(max(since, in.Hello)) < settle {
				full = false
				break
			}
		}
		if full {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("not every slot held within %v\n%s", timeout, w.describe())
		}
		time.Sleep(pollEvery)
	}
}

func (w *hworld) describe() string {
	var b strings.Builder
	for _, h := range w.hosts {
		fmt.Fprintf(&b, "---- %s (%s) ----\n", h.id, h.link)
		if h.proc != nil {
			b.WriteString(h.proc.Output(4 << 10))
		}
	}
	for s, f := range w.fences {
		ins := f.Instances()
		if len(ins) > 3 {
			ins = ins[len(ins)-3:]
		}
		for _, in := range ins {
			fmt.Fprintf(&b, "slot %d writer %s epoch %d accepted %d rejected %d closed %v\n", s, in.Name(), in.Epoch, in.Accepted, in.Rejected, in.Closed != 0)
		}
	}
	return b.String()
}

// waitSlotTaken waits until another host's child has written to slot s's
// fence after at, at least least has passed and the old child is dead.
func (w *hworld) waitSlotTaken(s int, old fence.Instance, at fence.Mono, least time.Duration) bool {
	deadline := time.Now().Add(w.takeoverTimeout())
	for time.Now().Before(deadline) {
		wr, in, ok := w.fences[s].LastAccepted()
		if ok && in.Writer != old.Writer && wr.At > at && fence.Now().Sub(at) >= least && !Alive(old.Pid) {
			return true
		}
		time.Sleep(pollEvery)
	}
	return false
}

func hKillHolder(w *hworld, h *host, _ int, _ fence.Instance) fence.Mono {
	at := fence.Now()
	_ = h.proc.Signal(syscall.SIGKILL)
	return at
}

func hKillChild(w *hworld, _ *host, _ int, in fence.Instance) fence.Mono {
	at := fence.Now()
	_ = syscall.Kill(in.Pid, syscall.SIGKILL)
	return at
}

func hFreeze(w *hworld, h *host, s int, in fence.Instance) fence.Mono {
	h.frozen = true
	at := fence.Now()
	_ = h.proc.Signal(syscall.SIGSTOP)
	ok := w.waitSlotTaken(s, in, at, w.tm.TTL)
	_ = h.proc.Signal(syscall.SIGCONT)
	h.frozen = false
	if !ok {
		w.t.Errorf("freeze-leaderrun: slot %d not taken over within %v while %s was stopped\n%s", s, w.takeoverTimeout(), h.id, w.describe())
	}
	return at
}

func hPartition(w *hworld, h *host, s int, in fence.Instance) fence.Mono {
	mode := Refuse
	if w.rng.IntN(2) == 1 {
		mode = Blackhole
	}
	h.cut = true
	at := fence.Now()
	h.link.Cut(mode)
	ok := w.waitSlotTaken(s, in, at, w.tm.TTL)
	h.link.Heal()
	h.cut = false
	if !ok {
		w.t.Errorf("partition (%v): slot %d not taken over within %v while %s was cut off\n%s", mode, s, w.takeoverTimeout(), h.id, w.describe())
	}
	return at
}

func hKillServer(w *hworld, _ *host, _ int, _ fence.Instance) fence.Mono {
	i := w.rng.IntN(w.cl.Servers())
	at := fence.Now()
	w.cl.Kill(i)
	time.Sleep(w.tm.TTL + time.Second)
	w.cl.Restart(i)
	w.cl.WaitHealthy(w.t)
	return at
}

// hMixedN starts two candidates that disagree with the hosts on N, one
// with a slot fewer and one with a slot more, as a holder dies and frees
// its slot. N is the key's (DESIGN §1.15): both are refused while the
// hosts hold their slots, whichever slots they read first, and the /proc
// watch sees no more than N children.
func hMixedN(w *hworld, h *host, _ int, _ fence.Instance) fence.Mono {
	var odd []*Proc
	for i, n := range []int{w.n - 1, w.n + 1} {
		if n < 1 {
			continue
		}
		c := &host{id: fmt.Sprintf("%s-n%d-%d", w.cl.Name(), n, i), link: h.link}
		odd = append(odd, w.startN(c, n))
	}
	at := fence.Now()
	_ = h.proc.Signal(syscall.SIGKILL)
	for _, p := range odd {
		code, ok := p.Wait(w.tm.TTL + 10*time.Second)
		if !ok {
			w.t.Errorf("mixed-n: a candidate of another N still runs %v after it started beside the holders\n%s", w.tm.TTL+10*time.Second, p.Output(4<<10))
			p.Kill()
			continue
		}
		if code != 125 {
			w.t.Errorf("mixed-n: a candidate of another N exited %d, want 125 (refused)\n%s", code, p.Output(4<<10))
		}
	}
	return at
}

// run strikes one holder with f and checks every slot's record.
func (w *hworld) run(i, n int, f holderFault) {
	t := w.t
	t.Helper()
	w.ensureHosts()
	w.waitFull(0, 0, w.stableTimeout())
	for _, h := range w.hosts {
		for time.Since(h.started) < standbyAge {
			time.Sleep(pollEvery)
		}
	}
	time.Sleep(time.Duration(w.rng.Int64N(int64(w.tm.RenewInterval))))
	w.waitFull(0, 0, w.stableTimeout())
	s := w.rng.IntN(w.n)
	h, in, ok := w.holder(s)
	if !ok {
		w.waitFull(0, 0, w.stableTimeout())
		h, in, _ = w.holder(s)
	}
	failed := t.Failed() // a fault's own checks count for its run too
	at := f.inject(w, h, s, in)
	healed := fence.Now()
	w.waitFull(healed, w.tm.RenewInterval+time.Second, w.stableTimeout())

	st := w.stats[f.name]
	if st == nil {
		st = &holderStats{}
		w.stats[f.name] = st
	}
	st.runs++
	if _, nin, ok := w.holder(s); ok && nin.Pid == in.Pid {
		st.kept++
	}
	var first fence.Mono
	for _, x := range w.fences[s].Instances() {
		if x.Epoch > in.Epoch && x.Started > at && (first == 0 || x.Started < first) {
			first = x.Started
		}
	}
	if first != 0 {
		st.failover = append(st.failover, first.Sub(at))
	}
	var epochs []string
	for sl, fc := range w.fences {
		lg := fc.Log(w.fed[sl])
		res := w.checks[sl].Feed(lg)
		w.fed[sl] += res.Writes
		st.overlaps += len(res.Overlaps)
		st.regressions += res.Regressions
		st.stale += res.Stale
		st.staleAccepted += res.StaleAccepted
		for _, o := range res.Overlaps {
			t.Errorf("%s: slot %d: accepted writes overlap: %v", f.name, sl, o)
		}
		if res.Regressions > 0 || len(res.SharedEpochs) > 0 {
			t.Errorf("%s: slot %d: %d accepted writes with a lower epoch; shared epochs %v", f.name, sl, res.Regressions, res.SharedEpochs)
		}
		if res.StaleAccepted > 0 {
			t.Errorf("%s: slot %d: %d stale writes accepted", f.name, sl, res.StaleAccepted)
		}
		for _, o := range res.LiveOverlaps {
			t.Errorf("%s: slot %d: two children of the slot wrote at once: %v", f.name, sl, o)
		}
		// Epochs strictly increase per slot, in the order the children
		// started.
		var last uint64
		var seq []string
		for _, x := range lg.Instances {
			if x.Accepted == 0 {
				continue
			}
			if x.Epoch <= last {
				t.Errorf("%s: slot %d: child %s has epoch %d after epoch %d", f.name, sl, x.Name(), x.Epoch, last)
			}
			last = x.Epoch
			seq = append(seq, strconv.FormatUint(x.Epoch, 10))
		}
		epochs = append(epochs, fmt.Sprintf("%d:%s", sl, seq[len(seq)-1]))
	}
	if a, sl, _ := w.watch.result(); a > w.n || sl > 1 {
		t.Errorf("%s: %d children alive at once, %d of one slot: %s", f.name, a, sl, w.watch.worstNow())
	}
	if t.Failed() && !failed {
		st.failed++
	}
	t.Logf("run %d/%d %-17s struck %s in slot %d (epoch %d); slots now %s", i+1, n, f.name, h.id, s, in.Epoch, strings.Join(epochs, " "))
}

// stopHosts sends SIGTERM to every host's leaderrun and checks how each
// exited.
func (w *hworld) stopHosts() {
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
		if !ok {
			w.t.Errorf("%s: leaderrun still running 30s after SIGTERM", h.id)
		} else if code != 143 && code != 123 && code != 137 && code != 0 {
			w.t.Errorf("%s: leaderrun exited %d after SIGTERM\n%s", h.id, code, h.proc.Output(8<<10))
		}
	}
}

func (w *hworld) waitNoneLeft() {
	w.t.Helper()
	scan := func() []Process { return Scan(w.bins.Leaderrun, w.bins.Writer, w.bins.Guard) }
	deadline := time.Now().Add(strayTimeout)
	for len(scan()) > 0 {
		if time.Now().After(deadline) {
			w.t.Errorf("left running after every leaderrun exited: %v", scan())
			killUntilGone(scan)
			return
		}
		time.Sleep(pollEvery)
	}
}

// aliveWatch samples /proc for the writer's processes. A sample counts the
// children that were all alive at one moment: it lists them, then checks
// each again; one alive at both looks was alive all the time between, and
// every listing comes before every second look.
type aliveWatch struct {
	exe      string
	done     chan struct{}
	once     sync.Once
	wg       sync.WaitGroup
	mu       sync.Mutex
	maxAlive int
	maxSlot  int
	samples  int
	worst    string
}

func watchAlive(exe string) *aliveWatch {
	a := &aliveWatch{exe: exe, done: make(chan struct{})}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		for {
			select {
			case <-a.done:
				return
			case <-time.After(10 * time.Millisecond):
			}
			a.sample()
		}
	}()
	return a
}

func (a *aliveWatch) sample() {
	type child struct {
		pid  int
		slot string
	}
	var seen []child
	for _, p := range Scan(a.exe) {
		slot, _ := Getenv(p.Pid, "LEADER_SLOT")
		if st, ok := Stat(p.Pid); ok && st.State != "Z" && st.State != "X" && st.State != "T" {
			seen = append(seen, child{p.Pid, slot})
		}
	}
	var alive []string
	per := map[string]int{}
	most := 0
	for _, c := range seen {
		if st, ok := Stat(c.pid); ok && st.State != "Z" && st.State != "X" {
			alive = append(alive, fmt.Sprintf("%d(slot %s)", c.pid, c.slot))
			per[c.slot]++
			most = max(most, per[c.slot])
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.samples++
	if len(alive) > a.maxAlive || most > a.maxSlot {
		a.worst = strings.Join(alive, " ")
	}
	a.maxAlive = max(a.maxAlive, len(alive))
	a.maxSlot = max(a.maxSlot, most)
}

func (a *aliveWatch) stop() {
	a.once.Do(func() { close(a.done) })
	a.wg.Wait()
}

func (a *aliveWatch) result() (maxAlive, maxSlot, samples int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.maxAlive, a.maxSlot, a.samples
}

func (a *aliveWatch) worstNow() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.worst
}

// holdersSummary renders the holders mode's table.
func holdersSummary(runs []*holdersRun) string {
	header := []string{"backend", "fault", "runs", "overlapping accepted writes (per slot)", "epoch regressions",
		"stale writes rejected / accepted", "holder kept its child", "fault → slot's next child, median / max", "runs failed"}
	var rows [][]string
	for _, r := range runs {
		if r.stats == nil {
			continue
		}
		total := 0
		for _, f := range holderFaults {
			st := r.stats[f.name]
			if st == nil {
				continue
			}
			total += st.runs
			fo := "–"
			if len(st.failover) > 0 {
				fo = Ms(st.failover.Median()) + " / " + Ms(st.failover.Max())
			}
			rows = append(rows, []string{r.name, f.name, strconv.Itoa(st.runs), strconv.Itoa(st.overlaps), strconv.Itoa(st.regressions),
				fmt.Sprintf("%d / %d", st.stale-st.staleAccepted, st.staleAccepted), fmt.Sprintf("%d/%d", st.kept, st.runs), fo, strconv.Itoa(st.failed)})
		}
		rows = append(rows, []string{"**" + r.name + "**", "**all**", strconv.Itoa(total),
			fmt.Sprintf("most children alive at once: %d; of one slot: %d (%d /proc samples)", r.maxAlive, r.maxSlot, r.samples), "", "", "", "", ""})
	}
	return Table(header, rows)
}

// holdersReport is the body of a holders run's results file
// (docs/results/chaos-*-holders-*.md).
func holdersReport(runs []*holdersRun, seed uint64, table string, failed bool) string {
	var b strings.Builder
	cmd := *flagCommand
	if cmd == "" {
		cmd = "go test ./tests/chaos -run 'TestChaos$' -v -args " + strings.Join(flag.Args(), " ")
	}
	fmt.Fprintf(&b, "Run on %s.\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&b, "- command: `%s`\n", cmd)
	fmt.Fprintf(&b, "- seed: `%d`\n", seed)
	fmt.Fprintf(&b, "- tree: %s\n", startCommit)
	fmt.Fprintf(&b, "- machine: %s; %s\n", Machine(), goVersion())
	for _, r := range runs {
		if r.stats != nil {
			fmt.Fprintf(&b, "- %s: %d leaderrun hosts with `--holders %d`, leaderrun %s; took %v\n", r.name, *flagHolders+2, *flagHolders,
				strings.Join(r.tm.Args(), " "), r.took.Round(time.Second))
		}
	}
	if failed {
		b.WriteString("- **the run FAILED**: see the test output for the violated checks\n")
	}
	b.WriteString("\n" + table)
	return b.String()
}
