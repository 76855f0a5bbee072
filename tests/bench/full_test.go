package bench

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/chaos"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

var (
	flagFull    = flag.Bool("bench.full", false, "run the full benchmark (make bench; about 35 minutes)")
	flagReport  = flag.String("bench.report", "", "results file to write whole, or a folder (docs/results/) that receives a new bench-DATE-KIND.md")
	flagIndex   = flag.String("bench.index", "", "method doc whose Results list gets the run's line (docs/BENCHMARKS.md)")
	flagTrials  = flag.Int("bench.trials", 20, "crash and graceful trials per contender")
	flagLoss    = flag.Int("bench.loss-trials", 10, "lease-loss trials per contender and cut mode")
	flagWindow  = flag.Duration("bench.footprint", time.Minute, "footprint measurement window")
	flagScale   = flag.String("bench.scale", "1,10,100", "candidate counts of the scale runs")
	flagCommand = flag.String("bench.command", "", "the command line to quote in the report")
)

// rivalLanes is how many lanes run a rival's trials side by side: its
// failovers wait out TTLs and lock-delays of 10-45s, idle time that lanes
// share. leaderrun's own crash and graceful trials run one at a time.
const rivalLanes = 5

// TestBenchmark measures leaderrun against `etcdctl lock` and `consul
// lock` on the same 3-server clusters, on a 3-server ZooKeeper ensemble,
// a PostgreSQL server and a dynalite server, and against client-go's
// leaderelection on a kube-apiserver, and writes a results file under
// docs/results/, listed in docs/BENCHMARKS.md. It
// runs only with -bench.full (make bench); TestBenchSmoke keeps the
// harness honest in the default test run.
func TestBenchmark(t *testing.T) {
	if !*flagFull {
		t.Skip("the full benchmark runs with -bench.full (make bench, about 35 minutes); TestBenchSmoke, TestBenchZooKeeper and TestBenchKubernetes cover its harness")
	}
	start := time.Now()
	commit := chaos.Commit() // the tree as built, before the long run
	e := newEnv(t, 3, 3, 3, true)
	pg := chaos.StartPostgres(t)
	e.Postgres = &pg
	dyn := chaos.StartDynamoDB(t)
	e.DynamoDB = &dyn
	cs := Contenders()
	res := NewResults(cs)
	phase := func(name string) func() {
		t.Logf("phase %s started at %v", name, time.Since(start).Round(time.Second))
		return func() { t.Logf("phase %s done at %v", name, time.Since(start).Round(time.Second)) }
	}
	var mu sync.Mutex
	add := func(c *Contender, kind string, ts []Trial) {
		mu.Lock()
		defer mu.Unlock()
		res.Add(c, kind, ts)
	}

	// 1. leaderrun's crash and graceful trials, alone on the machine.
	done := phase("leaderrun failover")
	for _, c := range cs {
		if c.Leaderrun {
			for _, kind := range []string{KindCrash, KindGraceful} {
				add(c, kind, e.Trials(c, kind, *flagTrials, 1))
			}
		}
	}
	done()

	// 1b. The same failovers taken apart step by step, on every backend
	// (DynamoDB and a local lock directory too), still alone.
	done = phase("breakdown")
	bd := runBreakdowns(t, e, testcluster.StartDynalite(t), max(*flagBreakdown, breakdownTrials))
	done()

	// 1c. Step-down, step-down --to and SIGTERM with two standbys, on
	// every backend, still alone.
	done = phase("step-down")
	sd := runStepDowns(t, e, max(*flagStepDown, stepDownRounds))
	done()

	// 2. The rivals' crash and graceful trials, side by side.
	done = phase("rival failover")
	var wg sync.WaitGroup
	for _, c := range cs {
		if c.Leaderrun {
			continue
		}
		for _, kind := range []string{KindCrash, KindGraceful} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				add(c, kind, e.Trials(c, kind, *flagTrials, rivalLanes))
			}()
		}
	}
	wg.Wait()
	done()

	// 3. Lease loss: every contender cut off its backend, both ways;
	// leaderrun's lanes first, one backend at a time, since its stop
	// timeline is what is measured (with every backend's lanes at once, a
	// 3s-TTL leader on this 2-core machine could miss renewals before the
	// trial even began); then the rivals' side by side.
	for _, own := range []bool{true, false} {
		done = phase(fmt.Sprintf("lease loss (leaderrun: %v)", own))
		for _, c := range cs {
			if c.Leaderrun != own {
				continue
			}
			for _, kind := range []string{KindRefuse, KindBlackhole, KindFreeze} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					add(c, kind, e.Trials(c, kind, *flagLoss, rivalLanes))
				}()
			}
			if own {
				wg.Wait()
			}
		}
		wg.Wait()
		done()
	}

	// 4. Footprint: a leader and a standby of each, side by side.
	done = phase("footprint")
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fp := e.Footprint(c, *flagWindow)
			mu.Lock()
			res.Footprints[c.Name()] = fp
			mu.Unlock()
		}()
	}
	wg.Wait()
	done()

	// 4b. PSS with 10 instances of each leaderrun, one backend at a time.
	done = phase("pss")
	pss := runPSS(e, filepath.Join(e.Dir, "pss-locks"))
	done()

	// 5. Scale: many candidates on one key, one contender at a time.
	done = phase("scale")
	sizes := scaleSizes()
	for _, c := range cs {
		if c.NoScale {
			continue
		}
		trials := 3
		if c.Tool == "consul lock" {
			trials = 1 // each failover waits out a 15-30s session and a 15s lock-delay
		}
		for _, n := range sizes {
			if c.MaxScale > 0 && n > c.MaxScale {
				res.Scale[c.Name()] = append(res.Scale[c.Name()], ScalePoint{N: n, Err: fmt.Sprintf("not run: over %d candidates on this shared machine", c.MaxScale)})
				continue
			}
			sp := e.Scale(c, n, 20*time.Second, trials)
			res.Scale[c.Name()] = append(res.Scale[c.Name()], sp)
			t.Logf("scale %s x%d: %+v", c.Name(), n, sp)
		}
	}
	done()

	took := time.Since(start)
	sd.Rivals = RivalRows(res)
	body := benchReport(res, bd, sd, commit, took) + pss.report()
	t.Logf("\n%s", body)
	for _, err := range res.Errors() {
		t.Logf("trial could not start (run again): %s", err)
	}
	if *flagReport != "" {
		writeRun(t, "full", "`make bench`, every contender on every backend", commit, body)
	}
}

// writeRun writes a run's results file under -bench.report, named after
// kind (full, holders, stepdown, breakdown) when that is a folder, and its
// line in -bench.index's Results list (docs/BENCHMARKS.md).
func writeRun(t *testing.T, kind, what, tree, body string) {
	outcome := "passed"
	if t.Failed() {
		outcome = "FAILED"
	}
	now := time.Now()
	file, err := chaos.WriteRun(chaos.Run{Path: *flagReport, Index: *flagIndex, List: "bench-runs", Kind: "bench", Desc: kind, When: now,
		Title: fmt.Sprintf("Benchmark run, %s: %s", now.UTC().Format("2006-01-02"), what),
		Tree:  tree, Summary: what + "; " + outcome, Body: body})
	if err != nil {
		t.Errorf("write report: %v", err)
		return
	}
	t.Logf("results written to %s", file)
}

// benchReport is the body of a `make bench` results file
// (docs/results/bench-*-full.md).
func benchReport(res *Results, bd *BreakdownSet, sd *StepDownSet, commit string, took time.Duration) string {
	var b strings.Builder
	cmd := *flagCommand
	if cmd == "" {
		cmd = "go test ./tests/bench -run TestBenchmark -v " + strings.Join(os.Args[1:], " ")
	}
	fmt.Fprintf(&b, "Run on %s; took %v.\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), took.Round(time.Second))
	fmt.Fprintf(&b, "- command: `%s`\n", cmd)
	fmt.Fprintf(&b, "- tree: %s\n", commit)
	fmt.Fprintf(&b, "- machine: %s\n", chaos.Machine())
	fmt.Fprintf(&b, "- servers: etcd v3.6.16, 3 members; Consul v1.14.11, 3 servers; ZooKeeper 3.8 (Debian), 3 servers, tickTime 200ms; kube-apiserver v1.37.2 on a 1-member etcd; PostgreSQL 15 (Debian), 1 server; dynalite 4.0.0, 1 server; all on 127.0.0.1\n")
	fmt.Fprintf(&b, "- leaderrun on etcd: `%s`; on Consul: `%s --consul-lock-delay %v`\n",
		strings.Join(chaos.EtcdTiming.Args(), " "), strings.Join(chaos.ConsulTiming.Args(), " "), chaos.ConsulTiming.LockDelay)
	fmt.Fprintf(&b, "- leaderrun on ZooKeeper: `%s`\n", strings.Join(chaos.ZooKeeperTiming.Args(), " "))
	fmt.Fprintf(&b, "- leaderrun on Kubernetes: `%s`\n", strings.Join(chaos.KubeTiming.Args(), " "))
	fmt.Fprintf(&b, "- leaderrun on PostgreSQL: `%s`\n", strings.Join(chaos.PostgresTiming.Args(), " "))
	fmt.Fprintf(&b, "- leaderrun on DynamoDB: `%s`\n", strings.Join(chaos.DynamoDBTiming.Args(), " "))
	fmt.Fprintf(&b, "- %s\n", k8sRivalNote())
	b.WriteString("- requests on Kubernetes are the TLS application-data records a client sent (the proxy cannot read TLS): they compare the two Kubernetes tools only\n")
	fmt.Fprintf(&b, "- trials: %d crash and %d graceful per contender, %d lease-loss trials per contender and cut; footprint over %v; scale windows 20s\n",
		*flagTrials, *flagTrials, *flagLoss, *flagWindow)
	if errs := res.Errors(); len(errs) > 0 {
		// Each was retried in a fresh lane; the tables hold only trials that ran.
		shown := errs[:min(len(errs), 3)]
		fmt.Fprintf(&b, "- %d trials could not start and were run again in a fresh lane, e.g.: %s\n", len(errs), strings.Join(shown, "; "))
	}
	b.WriteString("\n### Summary: leaderrun against the best rival on its backend\n\n" + ratioNote + res.RatioTable())
	b.WriteString("\n### Failover, handoff and the safety gap\n\n" + res.FailoverTable())
	b.WriteString("\n### The failover path, step by step\n\n" + breakdownNote + bd.Report())
	b.WriteString("\n### Step-down: moving the job now\n\n" + stepDownNote + sd.Table())
	b.WriteString("\n### Lease loss: the leader cut off its backend\n\n" + res.LeaseLossTable())
	b.WriteString("\n### Footprint while nothing happens\n\n" + res.FootprintTable())
	b.WriteString("\n### Scale: candidates on one key\n\n" + res.ScaleTable())
	return b.String()
}

// k8sRivalNote says how the Kubernetes rival was set up.
func k8sRivalNote() string {
	return fmt.Sprintf("k8s leaderelection: tests/bench/k8slock, client-go's leaderelection with a LeaseLock and ReleaseOnCancel; "+
		"OnStartedLeading starts the command, OnStoppedLeading exits the wrapper and leaves the command running (outside a pod nothing kills it); "+
		"defaults `%s`, matched `%s` (the defaults scaled by 1/5, which keeps client-go's lease > renew deadline > 1.2 x retry period)",
		strings.Join(K8sDefaults.Args(), " "), strings.Join(K8sMatched.Args(), " "))
}

var flagFailover = flag.Int("bench.failover", 0, "run only leaderrun's partition (blackhole) and freeze failover trials, this many per backend and kind")

// TestFailoverTrials measures how long leadership takes to move when the
// leader is cut off (blackhole) or its supervisor frozen, for leaderrun on
// 3-server etcd and Consul clusters, and prints the lease-loss table. It
// runs only with -bench.failover=N.
func TestFailoverTrials(t *testing.T) {
	if *flagFailover <= 0 {
		t.Skip("runs with -bench.failover=N")
	}
	e := newEnv(t, 3, 3, 0, false)
	var cs []*Contender
	for _, c := range Contenders() {
		if c.Leaderrun && e.Has(c) {
			cs = append(cs, c)
		}
	}
	res := NewResults(cs)
	for _, c := range cs {
		for _, kind := range []string{KindBlackhole, KindFreeze} {
			ts := e.Trials(c, kind, *flagFailover, 1)
			res.Add(c, kind, ts)
			for _, tr := range ts {
				t.Logf("%s %s: standby's child after %v (handoff %v, old child alive at its start %v, overlaps %d) %s",
					c.Name(), kind, tr.Failover.Round(time.Millisecond), tr.Handoff, tr.OldAlive, tr.Overlaps, tr.Err)
				if tr.OldAlive || tr.Overlaps > 0 {
					t.Errorf("%s %s: the old child was not gone before the new one started: %+v", c.Name(), kind, tr)
				}
			}
		}
	}
	t.Logf("\n%s", res.LeaseLossTable())
}
