//go:build linux

package bench

import (
	"testing"
	"time"
)

// benchAlone measures leaderrun alone on lr's backend, where no rival
// tool runs a command under a lock (PostgreSQL, DynamoDB): one trial of
// each kind, so that the rows cannot rot, or with full the benchmark's
// sizes, freezes included, and prints the tables. It asserts what
// leaderrun promises, never a timing.
func benchAlone(t *testing.T, e *Env, lr *Contender, full bool) {
	res := NewResults([]*Contender{lr})
	trials, loss, window, sizes := 1, 1, 3*time.Second, []int{3}
	kinds := []string{KindCrash, KindGraceful, KindRefuse, KindBlackhole}
	if full {
		trials, loss, window, sizes = *flagTrials, *flagLoss, *flagWindow, scaleSizes()
		kinds = append(kinds, KindFreeze)
	}
	for _, kind := range kinds {
		n := trials
		if kind == KindRefuse || kind == KindBlackhole || kind == KindFreeze {
			n = loss
		}
		ts := e.Trials(lr, kind, n, 1)
		res.Add(lr, kind, ts)
		ran := 0
		for _, tr := range ts {
			if tr.Err != "" {
				t.Logf("%s: could not run (retried in a fresh lane): %s", kind, tr.Err)
				continue
			}
			ran++
			if !tr.Handoff {
				t.Errorf("%s: no handoff: %+v", kind, tr)
			}
			if tr.OldAlive || tr.OldSurvived || tr.Overlaps > 0 {
				t.Errorf("%s: the old child was not gone before the new one started: %+v", kind, tr)
			}
			if (kind == KindRefuse || kind == KindBlackhole) && (!tr.Stopped || !tr.HasRenewal || tr.Stop >= lr.TTL || tr.SinceRenewal >= lr.TTL) {
				t.Errorf("%s: the child must die on its own before the TTL: %+v", kind, tr)
			}
		}
		if ran == 0 {
			t.Errorf("%s: no trial ran", kind)
		}
	}
	fp := e.Footprint(lr, window)
	res.Footprints[lr.Name()] = fp
	if fp.Err != "" || fp.LeaderRSS == 0 || fp.StandbyRSS == 0 || fp.LeaderReqs == 0 || fp.GuardRSS == 0 {
		t.Errorf("footprint: %+v", fp)
	}
	for _, n := range sizes {
		w := 2 * time.Second
		if full {
			w = 20 * time.Second
		}
		sp := e.Scale(lr, n, w, 3)
		res.Scale[lr.Name()] = append(res.Scale[lr.Name()], sp)
		t.Logf("scale x%d: %+v", n, sp)
		if sp.Err != "" {
			t.Errorf("scale %d: %s", n, sp.Err)
		}
	}
	t.Logf("\n%s\n%s\n%s\n%s", res.FailoverTable(), res.LeaseLossTable(), res.FootprintTable(), res.ScaleTable())
}
