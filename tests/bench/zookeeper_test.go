package bench

import (
	"flag"
	"testing"
	"time"
)

var flagZK = flag.Bool("bench.zk", false, "measure leaderrun on ZooKeeper with the -bench.trials, -bench.loss-trials, -bench.footprint and -bench.scale sizes (default: one of each)")

// TestBenchZooKeeper measures leaderrun's ZooKeeper rows on a 3-server
// ensemble (there is no ZooKeeper lock tool to set against it). By default
// it runs one trial of each kind, so the rows cannot rot; with -bench.zk it
// runs the benchmark's sizes and prints the tables. It asserts what
// leaderrun promises, never a timing.
func TestBenchZooKeeper(t *testing.T) {
	e := newEnv(t, 0, 0, 3, false)
	lr := contender(t, "leaderrun", "zookeeper", "")
	res := NewResults([]*Contender{lr})
	trials, loss, window, sizes := 1, 1, 3*time.Second, []int{3}
	if *flagZK {
		trials, loss, window, sizes = *flagTrials, *flagLoss, *flagWindow, scaleSizes()
	}
	for _, kind := range []string{KindCrash, KindGraceful, KindRefuse, KindBlackhole} {
		n := trials
		if kind == KindRefuse || kind == KindBlackhole {
			n = loss
		}
		ts := e.Trials(lr, kind, n, 1)
		res.Add(lr, kind, ts)
		for _, tr := range ts {
			if tr.Err != "" {
				continue // retried in a fresh lane and reported
			}
			if tr.OldAlive || tr.OldSurvived || tr.Overlaps > 0 {
				t.Errorf("%s: the old child was not gone before the new one started: %+v", kind, tr)
			}
			if (kind == KindRefuse || kind == KindBlackhole) && (!tr.Stopped || !tr.HasRenewal || tr.Stop >= lr.TTL || tr.SinceRenewal >= lr.TTL) {
				t.Errorf("%s: the child must die on its own before the TTL: %+v", kind, tr)
			}
		}
	}
	fp := e.Footprint(lr, window)
	res.Footprints[lr.Name()] = fp
	if fp.Err != "" || fp.LeaderRSS == 0 || fp.StandbyRSS == 0 || fp.LeaderReqs == 0 || fp.GuardRSS == 0 {
		t.Errorf("footprint: %+v", fp)
	}
	for _, n := range sizes {
		w := 2 * time.Second
		if *flagZK {
			w = 20 * time.Second
		}
		sp := e.Scale(lr, n, w, 3)
		res.Scale[lr.Name()] = append(res.Scale[lr.Name()], sp)
		if sp.Err != "" {
			t.Errorf("scale %d: %s", n, sp.Err)
		}
	}
	t.Logf("\n%s\n%s\n%s\n%s", res.FailoverTable(), res.LeaseLossTable(), res.FootprintTable(), res.ScaleTable())
}
