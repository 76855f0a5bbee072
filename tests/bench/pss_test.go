//go:build linux

package bench

import (
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/chaos"
)

var (
	flagPSS         = flag.Int("bench.pss", 0, "run only the PSS footprint: this many leaderruns of one key per backend (make bench-pss: 10)")
	flagPSSBackends = flag.String("bench.pss-backends", "local,etcd,consul,zookeeper,kubernetes,postgres,dynamodb", "the backends of -bench.pss")
)

// pssInstances is how many leaderruns of one key the PSS rows of `make
// bench` run on each backend.
const pssInstances = 10

// TestBenchPSS runs -bench.pss=N leaderruns of one key on one host on
// each backend, one backend at a time with its own server (one server
// each: the client's side is measured), and writes each role's PSS and
// anonymous memory to a results file (make bench-pss). It prints numbers
// and asserts none of them.
func TestBenchPSS(t *testing.T) {
	if *flagPSS <= 0 {
		t.Skip("runs with -bench.pss=N (make bench-pss)")
	}
	start, load0 := time.Now(), loadAvg()
	commit := chaos.Commit()
	var cs []*Contender
	pts := map[string]PSSPoint{}
	for _, backend := range strings.Split(*flagPSSBackends, ",") {
		t.Run(backend, func(t *testing.T) {
			e, c := pssEnv(t, backend)
			pt := e.FootprintPSS(c, *flagPSS, *flagWindow)
			t.Logf("%s: %+v", c.Name(), pt)
			if pt.Err != "" {
				t.Errorf("%s: %s", c.Name(), pt.Err)
			}
			cs, pts[c.Name()] = append(cs, c), pt
		})
	}
	var b strings.Builder
	cmd := *flagCommand
	if cmd == "" {
		cmd = fmt.Sprintf("go test ./tests/bench -run 'TestBenchPSS$' -v -args -bench.pss=%d -bench.footprint=%v", *flagPSS, *flagWindow)
	}
	fmt.Fprintf(&b, "Run on %s; took %v.\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), time.Since(start).Round(time.Second))
	fmt.Fprintf(&b, "- command: `%s`\n", cmd)
	fmt.Fprintf(&b, "- tree: %s\n", commit)
	fmt.Fprintf(&b, "- machine: %s\n", chaos.Machine())
	fmt.Fprintf(&b, "- load average before / after: %s / %s\n", load0, loadAvg())
	fmt.Fprintf(&b, "- %d leaderruns of one key per backend, one backend at a time, each on one server of its own (etcd, Consul, ZooKeeper, kube-apiserver, PostgreSQL, dynalite; the local backend a lock directory), through shared proxies; the benchmark's timing (`--ttl 3s`, Consul 10s); after %v of settling, each process's peak over %v, sampled every second\n",
		*flagPSS, min(*flagWindow, footprintSettle), *flagWindow)
	b.WriteString("\n" + pssHowToRead + "\n\n")
	b.WriteString(PSSTable(cs, pts))
	t.Logf("\n%s", b.String())
	if *flagReport != "" {
		writeRun(t, "pss", fmt.Sprintf("`make bench-pss`, PSS with %d instances on every backend", *flagPSS), commit, b.String())
	}
}

// pssHowToRead heads the PSS table.
const pssHowToRead = "PSS (Pss: in /proc/PID/smaps_rollup) is what a process costs the host: its private pages and its share of " +
	"the pages it shares, the binary's pages divided among every leaderrun mapping them; in brackets its anonymous memory " +
	"(RssAnon: heap, stacks, runtime data, shared with nobody). MiB; the standby column is the median of the standbys' peaks. " +
	"Targets: a standby <= 8 MiB, a leader and its guard together <= 12 MiB."

// pssEnv starts backend's server for t and gives the leaderrun contender
// that uses it.
func pssEnv(t *testing.T, backend string) (*Env, *Contender) {
	if backend == "local" {
		e := newEnv(t, 0, 0, 0, false)
		return e, localContender(filepath.Join(e.Dir, "locks"))
	}
	return backendEnv(t, backend, 1), contender(t, "leaderrun", backend, "")
}

// pssRuns are the PSS rows of a run of `make bench`.
type pssRuns struct {
	cs  []*Contender
	pts map[string]PSSPoint
}

// runPSS measures pssInstances leaderruns of one key on every backend e
// has and on the local backend (its lock files under dir), one backend at
// a time.
func runPSS(e *Env, dir string) pssRuns {
	r := pssRuns{pts: map[string]PSSPoint{}}
	for _, c := range append(Contenders(), localContender(dir)) {
		if !c.Leaderrun || !e.Has(c) {
			continue
		}
		r.cs = append(r.cs, c)
		r.pts[c.Name()] = e.FootprintPSS(c, pssInstances, *flagWindow)
	}
	return r
}

// report is the PSS section of a `make bench` results file.
func (r pssRuns) report() string {
	return fmt.Sprintf("\n### PSS with %d instances\n\n%s\n\n%s", pssInstances, pssHowToRead, PSSTable(r.cs, r.pts))
}

// TestBenchPSSSmoke runs the PSS rows' code once, on the local backend
// with three instances and a short window, so that `make bench-pss` and
// the PSS table of `make bench` cannot rot unnoticed. It asserts that
// every role was found and measured, never a size.
func TestBenchPSSSmoke(t *testing.T) {
	e := newEnv(t, 0, 0, 0, false)
	c := localContender(filepath.Join(e.Dir, "locks"))
	pt := e.FootprintPSS(c, 3, 3*time.Second)
	if pt.Err != "" {
		t.Fatalf("PSS rows: %s", pt.Err)
	}
	if pt.Standbys != 2 || pt.Leader.PSS == 0 || pt.Leader.Anon == 0 || pt.Guard.PSS == 0 || pt.Standby.PSS == 0 || pt.Total < pt.Leader.PSS+pt.Guard.PSS {
		t.Errorf("PSS rows: a role not measured: %+v", pt)
	}
	t.Logf("\n%s", PSSTable([]*Contender{c}, map[string]PSSPoint{c.Name(): pt}))
}
