package bench

import (
	"flag"
	"testing"
	"time"
)

var flagKube = flag.Bool("bench.kube", false, "measure the Kubernetes rows (leaderrun and client-go's leaderelection) with the -bench.trials, -bench.loss-trials, -bench.footprint and -bench.scale sizes (default: one of each)")

// TestBenchKubernetes measures the Kubernetes rows on one kube-apiserver:
// leaderrun, and k8slock, client-go's leaderelection on a Lease as
// operators wrap a command with it, with the client-go defaults and with
// leaderrun's TTL. By default it runs one trial of each kind of each, so
// the rows cannot rot; with -bench.kube it runs the benchmark's sizes and
// prints the tables. It asserts what leaderrun promises, and of the rival
// only that its trials could run, never a timing nor what it does with its
// command.
func TestBenchKubernetes(t *testing.T) {
	e := newEnv(t, 0, 0, 0, true)
	var cs []*Contender
	for _, c := range Contenders() {
		if c.Backend == "kubernetes" {
			cs = append(cs, c)
		}
	}
	res := NewResults(cs)
	trials, loss, window, sizes := 1, 1, 3*time.Second, []int{3}
	if *flagKube {
		trials, loss, window, sizes = *flagTrials, *flagLoss, *flagWindow, scaleSizes()
	}
	for _, c := range cs {
		kinds := []string{KindCrash, KindGraceful, KindRefuse, KindBlackhole}
		if *flagKube {
			kinds = append(kinds, KindFreeze)
		}
		if !c.Leaderrun && !*flagKube {
			// Its failovers wait out its lease: one crash keeps the
			// wrapper building and running against the server.
			kinds = []string{KindCrash}
			if c.TTL > 5*time.Second {
				continue
			}
		}
		lanes := 1
		if !c.Leaderrun {
			lanes = rivalLanes
		}
		for _, kind := range kinds {
			n := trials
			if kind == KindRefuse || kind == KindBlackhole || kind == KindFreeze {
				n = loss
			}
			ts := e.Trials(c, kind, n, lanes)
			res.Add(c, kind, ts)
			ran := 0
			for _, tr := range ts {
				if tr.Err != "" {
					t.Logf("%s %s: could not run (retried in a fresh lane): %s", c.Name(), kind, tr.Err)
					continue
				}
				ran++
				if !c.Leaderrun {
					continue
				}
				if !tr.Handoff {
					t.Errorf("%s %s: no handoff: %+v", c.Name(), kind, tr)
				}
				if tr.OldAlive || tr.OldSurvived || tr.Overlaps > 0 {
					t.Errorf("%s %s: the old child was not gone before the new one started: %+v", c.Name(), kind, tr)
				}
				if (kind == KindRefuse || kind == KindBlackhole) && (!tr.Stopped || !tr.HasRenewal || tr.Stop >= c.TTL || tr.SinceRenewal >= c.TTL) {
					t.Errorf("%s %s: the child must die on its own before the TTL: %+v", c.Name(), kind, tr)
				}
			}
			if ran == 0 {
				t.Errorf("%s %s: no trial ran", c.Name(), kind)
			}
		}
		if !c.Leaderrun && !*flagKube {
			continue
		}
		fp := e.Footprint(c, window)
		res.Footprints[c.Name()] = fp
		if c.Leaderrun && (fp.Err != "" || fp.LeaderRSS == 0 || fp.StandbyRSS == 0 || fp.LeaderReqs == 0 || fp.GuardRSS == 0) {
			t.Errorf("footprint of %s: %+v", c.Name(), fp)
		}
		if c.NoScale {
			continue
		}
		for _, n := range sizes {
			w := 2 * time.Second
			if *flagKube {
				w = 20 * time.Second
			}
			sp := e.Scale(c, n, w, 3)
			res.Scale[c.Name()] = append(res.Scale[c.Name()], sp)
			if sp.Err != "" && c.Leaderrun {
				t.Errorf("%s scale %d: %s", c.Name(), n, sp.Err)
			}
		}
	}
	t.Logf("\n%s\n%s\n%s\n%s", res.FailoverTable(), res.LeaseLossTable(), res.FootprintTable(), res.ScaleTable())
	t.Logf("%s", k8sRivalNote())
}
