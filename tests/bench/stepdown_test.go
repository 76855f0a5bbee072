//go:build linux

package bench

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/chaos"
)

var flagStepDown = flag.Int("bench.stepdown", 0, "run only the step-down rounds, this many of each kind per backend (make bench-stepdown)")

// stepDownRounds is how many rounds of each kind make bench runs per
// backend.
const stepDownRounds = 5

// TestStepDown measures `leaderrun step-down` and `step-down --to` against
// a SIGTERM to the leader, with a leader and two standbys, on every
// backend: 3-server etcd, Consul and ZooKeeper clusters, a kube-apiserver,
// a PostgreSQL server, dynalite and a local lock directory; and writes the
// table to a results file of its own, with the rivals' graceful handoffs
// copied from the failover table of the newest `make bench` results file
// beside it. It runs only with
// -bench.stepdown=N (make bench-stepdown); TestBenchSmoke runs one round of
// each kind on etcd.
func TestStepDown(t *testing.T) {
	if *flagStepDown <= 0 {
		t.Skip("runs with -bench.stepdown=N (make bench-stepdown)")
	}
	start, load0 := time.Now(), loadAvg()
	commit := chaos.Commit()
	e := newEnv(t, 3, 3, 3, false)
	k := chaos.StartKube(t)
	e.Kube = &k
	pg := chaos.StartPostgres(t)
	e.Postgres = &pg
	dyn := chaos.StartDynamoDB(t)
	e.DynamoDB = &dyn
	set := runStepDowns(t, e, *flagStepDown)
	var run string
	if *flagReport != "" {
		set.Rivals, run = rivalRowsFrom(newestFullRun(*flagReport))
	}
	var b strings.Builder
	cmd := *flagCommand
	if cmd == "" {
		cmd = fmt.Sprintf("go test ./tests/bench -run 'TestStepDown$' -v -args -bench.stepdown=%d", *flagStepDown)
	}
	fmt.Fprintf(&b, "Run on %s; took %v.\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), time.Since(start).Round(time.Second))
	fmt.Fprintf(&b, "- command: `%s`\n", cmd)
	fmt.Fprintf(&b, "- tree: %s\n", commit)
	fmt.Fprintf(&b, "- machine: %s\n", chaos.Machine())
	fmt.Fprintf(&b, "- load average before / after: %s / %s\n", load0, loadAvg())
	b.WriteString(stepDownServers)
	fmt.Fprintf(&b, "- rounds: %d of each kind per backend, the kinds interleaved; p99 of so few is their largest\n", *flagStepDown)
	if run != "" {
		fmt.Fprintf(&b, "- rival rows: copied from the failover table of the `make bench` run on %s (its own trials, one standby)\n", run)
	}
	if errs := set.Errors(); len(errs) > 0 {
		fmt.Fprintf(&b, "- %d rounds could not run and were run again in a fresh lane, e.g.: %s\n", len(errs), errs[0])
	}
	b.WriteString("\n" + set.Table())
	t.Logf("\n%s", b.String())
	if *flagReport != "" {
		writeRun(t, "stepdown", "`make bench-stepdown`, every backend", commit, b.String())
	}
}

// stepDownServers says what the step-down rounds ran against.
const stepDownServers = "- servers: etcd, Consul and ZooKeeper, 3 servers each; kube-apiserver on a 1-member etcd; PostgreSQL 15, 1 server; dynalite; " +
	"a local lock directory; every candidate through proxies of its own, the command straight to the servers; leaderrun's timing as in the failover table\n"

// runStepDowns runs n rounds of each kind for leaderrun on every backend
// of e and a local lock directory, one backend at a time.
func runStepDowns(t *testing.T, e *Env, n int) *StepDownSet {
	set := NewStepDownSet()
	for _, c := range e.BreakdownContenders(nil) {
		sds := e.StepDowns(c, n)
		set.Add(sds)
		for _, sd := range sds {
			t.Logf("step-down %s %s: %s -> %s (to %q): death %v, start %v, exit %v, saw old alive %v, overlaps %d, %q %s",
				sd.Backend, sd.Kind, sd.From, sd.Next, sd.To, sd.Death, sd.Start, sd.Exit, sd.OldAlive, sd.Overlaps, sd.Out, sd.Err)
		}
	}
	for _, err := range set.Errors() {
		t.Logf("step-down round could not run (run again): %s", err)
	}
	return set
}

// smokeStepDown runs one round of each kind on contender c and checks
// what leaderrun promises: another candidate leads (the chosen one with
// --to), the old child was gone when the new one started, no writes
// interleaved, and the command exited 0 naming the new leader.
func smokeStepDown(t *testing.T, e *Env, c *Contender) {
	t.Helper()
	start := time.Now()
	set := NewStepDownSet()
	sds := e.StepDowns(c, 1)
	t.Logf("step-down smoke: %d rounds in %v", len(sds), time.Since(start).Round(time.Millisecond))
	set.Add(sds)
	for _, sd := range sds {
		t.Logf("step-down %s %s: %+v", sd.Backend, sd.Kind, sd)
	}
	for _, kind := range StepDownKinds {
		rs := set.Rounds[c.Backend][kind]
		if len(rs) != 1 || rs[0].Err != "" {
			t.Errorf("step-down %s: %+v", kind, rs)
			continue
		}
		sd := rs[0]
		if sd.Next == "" || sd.Next == sd.From || sd.OldAlive || sd.Overlaps > 0 || !sd.HasDeath || sd.Start <= 0 {
			t.Errorf("step-down %s: no clean handover: %+v", kind, sd)
		}
		if kind == KindStepDownTo && (sd.To == "" || sd.Next != sd.To) {
			t.Errorf("step-down --to %q: %s leads", sd.To, sd.Next)
		}
		if kind != KindRestart && kind != KindZombie && (!sd.HasExit || !strings.Contains(sd.Out, sd.Next)) {
			t.Errorf("step-down %s: the command did not exit naming %s: %+v", kind, sd.Next, sd)
		}
	}
	t.Logf("\n%s", set.Table())
}

// TestControlArgv: a run's command line becomes a control command's.
func TestControlArgv(t *testing.T) {
	for _, tc := range []struct {
		run, want []string
	}{
		{[]string{"/bin/leaderrun", "--backend", "etcd", "--etcd-endpoints", "a,b", "--ttl", "3s", "--renew-interval", "1s", "--key", "k", "--id", "x", "--log-level", "debug", "--", "/bin/writer", "--ttl", "9"},
			[]string{"/bin/leaderrun", "step-down", "--backend", "etcd", "--etcd-endpoints", "a,b", "--key", "k"}},
		{[]string{"/usr/bin/env", "A=1", "/bin/leaderrun", "--backend", "dynamodb", "--dynamodb-create-table", "--log-format", "json", "--kill-grace", "1s", "--safety-margin", "1s", "--key", "k", "--", "w"},
			[]string{"/usr/bin/env", "A=1", "/bin/leaderrun", "step-down", "--backend", "dynamodb", "--dynamodb-create-table", "--key", "k"}},
		{[]string{"/bin/etcdctl", "lock", "k"}, nil},
	} {
		if got := controlArgv(tc.run, "/bin/leaderrun", "step-down"); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("controlArgv(%q) = %q, want %q", tc.run, got, tc.want)
		}
	}
}

// TestRivalRows: the rivals' graceful trials become step-down rows, from a
// run's results or from the failover table of the newest `make bench`
// results file in docs/results/.
func TestRivalRows(t *testing.T) {
	rival := contender(t, "consul lock", "consul", "(-shell=false)")
	res := NewResults([]*Contender{contender(t, "leaderrun", "etcd", ""), rival})
	res.Add(rival, KindGraceful, []Trial{
		{Handoff: true, Failover: 900 * time.Millisecond, Stop: 100 * time.Millisecond, Stopped: true},
		{Handoff: true, Failover: 700 * time.Millisecond, OldAlive: true, Overlaps: 2},
		{Err: "could not start"},
	})
	rows := RivalRows(res)
	want := []string{"consul", "SIGTERM to " + rival.Name() + " (its graceful handoff, one standby)", "2",
		"100 ms / 100 ms (1/2 died)", "700 ms / 900 ms (2/2 handed off)", "n/a", "1/2", "1/2"}
	if len(rows) != 1 || !reflect.DeepEqual(rows[0], want) {
		t.Errorf("RivalRows = %q, want [%q]", rows, want)
	}

	full := newestFullRun("../../docs/results/")
	rows, run := rivalRowsFrom(full)
	backends := map[string]int{}
	for _, r := range rows {
		backends[r[0]]++
		if len(r) != len(stepDownHeader) || !strings.Contains(r[4], "handed off") {
			t.Errorf("row from the failover table: %q", r)
		}
	}
	if run == "" || backends["etcd"] == 0 || backends["consul"] == 0 || backends["kubernetes"] == 0 {
		t.Errorf("rival rows from %s (run %q): %q", full, run, rows)
	}
}

// TestReportNewestFullRun: the step-down run takes its rival rows from the
// newest `make bench` results file, a later run of a day ("-full-2")
// included, whether it is given the results folder or a file in it.
func TestReportNewestFullRun(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"bench-2026-12-01-full.md", "bench-2026-12-02-full.md", "bench-2026-12-02-full-2.md", "bench-2026-12-03-stepdown.md"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want := filepath.Join(dir, "bench-2026-12-02-full-2.md")
	for _, report := range []string{dir, dir + "/", filepath.Join(dir, "bench-2026-12-04-stepdown.md")} {
		if got := newestFullRun(report); got != want {
			t.Errorf("newestFullRun(%s) = %s, want %s", report, got, want)
		}
	}
	if got := newestFullRun(t.TempDir() + "/"); got != "" {
		t.Errorf("newestFullRun of an empty folder = %q", got)
	}
}
