//go:build linux

package bench

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/chaos"
	"github.com/leaderrun/leaderrun/tests/fence"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

var (
	flagBreakdown         = flag.Int("bench.breakdown", 0, "run only the failover breakdown, this many crash and handoff trials per backend (make bench-breakdown)")
	flagBreakdownBackends = flag.String("bench.breakdown-backends", "", "run the breakdown on these backends only (comma-separated: etcd, consul, zookeeper, kubernetes, postgres, dynamodb, local; default: all)")
)

// breakdownOn reports whether the breakdown runs on backend be.
func breakdownOn(be string) bool {
	return *flagBreakdownBackends == "" || slices.Contains(strings.Split(*flagBreakdownBackends, ","), be)
}

// servers is n when the breakdown runs on backend be, else 0.
func servers(be string, n int) int {
	if breakdownOn(be) {
		return n
	}
	return 0
}

// TestBreakdown takes failovers apart, step by step, on every backend:
// 3-server etcd, Consul and ZooKeeper clusters, a kube-apiserver, a
// PostgreSQL server, dynalite and a local lock directory, and writes the
// tables to a results file of its own. It runs only with
// -bench.breakdown=N (make bench-breakdown); TestBenchSmoke covers its code
// on etcd and the local backend.
func TestBreakdown(t *testing.T) {
	if *flagBreakdown <= 0 {
		t.Skip("runs with -bench.breakdown=N (make bench-breakdown)")
	}
	start, load0 := time.Now(), loadAvg()
	commit := chaos.Commit()
	e := newEnv(t, servers("etcd", 3), servers("consul", 3), servers("zookeeper", 3), false)
	if breakdownOn("kubernetes") {
		k := chaos.StartKube(t)
		e.Kube = &k
	}
	if breakdownOn("postgres") {
		pg := chaos.StartPostgres(t)
		e.Postgres = &pg
	}
	var dyn *testcluster.Dynalite
	if breakdownOn("dynamodb") {
		dyn = testcluster.StartDynalite(t)
	}
	set := runBreakdowns(t, e, dyn, *flagBreakdown)
	var b strings.Builder
	cmd := *flagCommand
	if cmd == "" {
		cmd = fmt.Sprintf("go test ./tests/bench -run 'TestBreakdown$' -v -args -bench.breakdown=%d", *flagBreakdown)
	}
	fmt.Fprintf(&b, "Run on %s; took %v.\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), time.Since(start).Round(time.Second))
	fmt.Fprintf(&b, "- command: `%s`\n", cmd)
	fmt.Fprintf(&b, "- tree: %s\n", commit)
	fmt.Fprintf(&b, "- machine: %s\n", chaos.Machine())
	fmt.Fprintf(&b, "- load average before / after: %s / %s\n", load0, loadAvg())
	if *flagBreakdownBackends == "" {
		b.WriteString(breakdownServers)
	} else {
		fmt.Fprintf(&b, "- servers: only those of %s (etcd: 3 servers), as `make bench-breakdown` starts them\n", *flagBreakdownBackends)
	}
	fmt.Fprintf(&b, "- trials: %d crash and %d handoff per backend\n", *flagBreakdown, *flagBreakdown)
	if errs := set.Errors(); len(errs) > 0 {
		fmt.Fprintf(&b, "- %d trials could not run and were run again in a fresh lane, e.g.: %s\n", len(errs), errs[0])
	}
	b.WriteString("\n")
	b.WriteString(set.Report())
	t.Logf("\n%s", b.String())
	if *flagReport != "" {
		what := "`make bench-breakdown`, every backend"
		if *flagBreakdownBackends != "" {
			what = "`make bench-breakdown`, " + strings.ReplaceAll(*flagBreakdownBackends, ",", " and ") + " only"
		}
		writeRun(t, "breakdown", what, commit, b.String())
	}
}

// breakdownServers says what the breakdown ran against.
const breakdownServers = "- servers: etcd, Consul and ZooKeeper, 3 servers each; kube-apiserver on a 1-member etcd; PostgreSQL 15, 1 server; dynalite; " +
	"a local lock directory; every candidate through proxies of its own, as in the failover table; leaderrun's timing as there " +
	"(DynamoDB: `--ttl 3s --renew-interval 500ms --kill-grace 1s --safety-margin 500ms`; local: etcd's)\n"

// loadAvg is /proc/loadavg's first three fields: the machine is shared,
// and the figures are as noisy as it was busy.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

// runBreakdowns runs n crash and n handoff breakdowns for leaderrun on
// every backend of e, dyn and a local lock directory, one backend at a
// time.
func runBreakdowns(t *testing.T, e *Env, dyn *testcluster.Dynalite, n int) *BreakdownSet {
	set := NewBreakdownSet()
	for _, c := range e.BreakdownContenders(dyn) {
		if !breakdownOn(c.Backend) {
			continue
		}
		for _, kind := range []string{KindCrash, KindGraceful} {
			bs := e.Breakdowns(c, kind, n)
			set.Add(bs)
			for _, b := range bs {
				t.Logf("breakdown %s %s: total %v %v %s", b.Backend, b.Kind, b.Total, b.At, b.Err)
			}
		}
	}
	for _, err := range set.Errors() {
		t.Logf("breakdown trial could not run (run again): %s", err)
	}
	return set
}

// smokeBreakdown runs one crash and one handoff breakdown on every backend
// e has and on the local backend, and checks that each placed its steps in
// order.
func smokeBreakdown(t *testing.T, e *Env) {
	t.Helper()
	set := runBreakdowns(t, e, nil, 1)
	for _, be := range set.Backends {
		for _, kind := range []string{KindCrash, KindGraceful} {
			bs := set.Trials[be][kind]
			if len(bs) != 1 || bs[0].Err != "" {
				t.Errorf("breakdown %s %s: %+v", be, kind, bs)
				continue
			}
			checkBreakdown(t, bs[0])
		}
	}
	t.Logf("\n%s", set.Report())
}

// checkBreakdown checks that a breakdown placed every step, in order where
// one step must follow another.
func checkBreakdown(t *testing.T, b Breakdown) {
	t.Helper()
	steps := BreakdownSteps(b.Kind)
	for _, s := range steps {
		if _, ok := b.At[s.Name]; !ok && !(s.Name == stepWake && b.Backend == "local") {
			t.Errorf("breakdown %s %s: step %q not placed: %v", b.Backend, b.Kind, s.Name, b.At)
		}
	}
	if b.Total <= 0 || b.At[stepChild] != b.Total {
		t.Errorf("breakdown %s %s: total %v, child's start at %v", b.Backend, b.Kind, b.Total, b.At[stepChild])
	}
	// The old side's steps follow one another, and the release comes before
	// the standby wins the key; from there the standby's follow one
	// another. (Its wake-up may come before the release's own answer.)
	chain := []string{steps[0].Name, steps[1].Name, steps[2].Name}
	for _, s := range standbySteps[1:] {
		chain = append(chain, s.Name)
	}
	for i := 1; i < len(chain); i++ {
		prev := chain[i-1]
		if chain[i] == stepChild && i >= 2 {
			// The child may run before its parent is back from
			// fork/exec and has logged "child started".
			prev = chain[i-2]
		}
		if a, z := b.At[prev], b.At[chain[i]]; z < a || a < 0 {
			t.Errorf("breakdown %s %s: %q at %v, before %q at %v", b.Backend, b.Kind, chain[i], z, prev, a)
		}
	}
	if w, ok := b.At[stepWake]; ok && (w < b.At[steps[2].Name] || w > b.At[standbySteps[1].Name]) {
		t.Errorf("breakdown %s %s: wake-up at %v outside release sent %v .. key won %v", b.Backend, b.Kind, w, b.At[steps[2].Name], b.At[standbySteps[1].Name])
	}
}

// checkRatios checks the summary of a smoke run: etcd has a rival, whose
// crash failover and footprint were measured.
func checkRatios(t *testing.T, res *Results) {
	t.Helper()
	tab := res.RatioTable()
	t.Logf("\n%s", tab)
	row := ""
	for _, l := range strings.Split(tab, "\n") {
		if strings.HasPrefix(l, "| etcd |") {
			row = l
		}
	}
	cells := strings.Split(row, " | ")
	if len(cells) != len(ratioFigures)+1 {
		t.Fatalf("ratio table has no etcd row of %d figures:\n%s", len(ratioFigures), tab)
	}
	// crash failover, leader RSS and standby RSS were measured for both.
	for _, i := range []int{1, 5, 6} {
		if !strings.HasPrefix(cells[i], "×") || !strings.Contains(cells[i], "etcdctl lock") {
			t.Errorf("ratio of %s: %q", ratioFigures[i-1].name, cells[i])
		}
	}
}

// TestWakeUp: the standby's wake-up is the first answer after the release
// that answers nothing asked before it.
func TestWakeUp(t *testing.T) {
	const release = 100
	for _, tc := range []struct {
		name   string
		chunks []chunk
		want   fence.Mono
		ok     bool
	}{
		{"a notification on a watch", []chunk{{at: 50, conn: 1}, {at: 51, conn: 1, toClient: true}, {at: 120, conn: 2, toClient: true}}, 120, true},
		{"a poll in flight still saw the holder", []chunk{{at: 90, conn: 1}, {at: 110, conn: 1, toClient: true}, {at: 130, conn: 1}, {at: 140, conn: 1, toClient: true}}, 140, true},
		{"a keepalive on another connection is not the notification", []chunk{{at: 95, conn: 2}, {at: 101, conn: 2, toClient: true}, {at: 105, conn: 1, toClient: true}}, 105, true},
		{"the same connection number on two proxies", []chunk{{at: 95, conn: 1, proxy: 1}, {at: 101, conn: 1, toClient: true}}, 101, true},
		{"nothing after the release", []chunk{{at: 10, conn: 1}, {at: 11, conn: 1, toClient: true}}, 0, false},
	} {
		if got, ok := wakeUp(tc.chunks, release); got != tc.want || ok != tc.ok {
			t.Errorf("%s: wake-up %d %v, want %d %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}
