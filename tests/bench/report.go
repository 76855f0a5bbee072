//go:build linux

package bench

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leaderrun/leaderrun/tests/chaos"
)

// Results is everything one benchmark run measured, by contender name.
type Results struct {
	Contenders []*Contender
	Trials     map[string]map[string][]Trial
	Footprints map[string]Footprint
	Scale      map[string][]ScalePoint
}

// NewResults returns empty results for contenders.
func NewResults(cs []*Contender) *Results {
	return &Results{Contenders: cs, Trials: map[string]map[string][]Trial{}, Footprints: map[string]Footprint{}, Scale: map[string][]ScalePoint{}}
}

// Add records trials of one kind.
func (r *Results) Add(c *Contender, kind string, ts []Trial) {
	if r.Trials[c.Name()] == nil {
		r.Trials[c.Name()] = map[string][]Trial{}
	}
	r.Trials[c.Name()][kind] = append(r.Trials[c.Name()][kind], ts...)
}

// spread formats a sample as "median (p95 p95, max max)" and its size.
func spread(d chaos.Durations) string {
	if len(d) == 0 {
		return "–"
	}
	return fmt.Sprintf("%s (p95 %s, max %s)", chaos.Ms(d.Median()), chaos.Ms(d.Quantile(0.95)), chaos.Ms(d.Max()))
}

// handoffs are the failover times of the trials that handed off.
func handoffs(ts []Trial) (d chaos.Durations, ok, ran int) {
	for _, t := range ts {
		if t.Err != "" {
			continue
		}
		ran++
		if t.Handoff {
			ok++
			d = append(d, t.Failover)
		}
	}
	return d, ok, ran
}

// FailoverTable is the crash, handoff and safety-gap table.
func (r *Results) FailoverTable() string {
	header := []string{"tool", "crash failover: median (p95, max)", "graceful handoff: median (p95, max)",
		"safety gap: min / median", "new child saw old alive", "old child left running", "overlapping writes"}
	var rows [][]string
	for _, c := range r.Contenders {
		tr := r.Trials[c.Name()]
		if tr == nil {
			continue
		}
		crash, cok, cran := handoffs(tr[KindCrash])
		grace, gok, gran := handoffs(tr[KindGraceful])
		var gaps chaos.Durations
		alive, left, overlaps, total := 0, 0, 0, 0
		for _, t := range append(append([]Trial(nil), tr[KindCrash]...), tr[KindGraceful]...) {
			if t.Err != "" {
				continue
			}
			total++
			if t.OldAlive {
				alive++
			}
			if t.OldSurvived {
				left++
			}
			if t.Overlaps > 0 {
				overlaps++
			}
			if t.Handoff && !t.OldSurvived && !t.OldAlive {
				gaps = append(gaps, t.Gap)
			}
		}
		gap := "–"
		if len(gaps) > 0 {
			gap = chaos.Ms(gaps.Min()) + " / " + chaos.Ms(gaps.Median())
		}
		rows = append(rows, []string{
			c.Name(),
			fmt.Sprintf("%s; %d/%d handed off", spread(crash), cok, cran),
			fmt.Sprintf("%s; %d/%d handed off", spread(grace), gok, gran),
			gap,
			fmt.Sprintf("%d/%d", alive, total),
			fmt.Sprintf("%d/%d", left, total),
			fmt.Sprintf("%d/%d", overlaps, total),
		})
	}
	return chaos.Table(header, rows)
}

// LeaseLossTable is the table of cuts from the backend.
func (r *Results) LeaseLossTable() string {
	header := []string{"tool", "cut", "TTL", "child stopped after the cut: median (max)", "last renewal → child death (max)",
		"standby's child started after the cut: median", "old child left running", "overlapping writes"}
	var rows [][]string
	for _, c := range r.Contenders {
		for _, kind := range []string{KindRefuse, KindBlackhole, KindFreeze} {
			ts := r.Trials[c.Name()][kind]
			if len(ts) == 0 {
				continue
			}
			var stop, since, take chaos.Durations
			left, overlaps, ran := 0, 0, 0
			for _, t := range ts {
				if t.Err != "" {
					continue
				}
				ran++
				if t.Stopped {
					stop = append(stop, t.Stop)
				}
				if t.HasRenewal {
					since = append(since, t.SinceRenewal)
				}
				if t.Handoff {
					take = append(take, t.Failover)
				}
				if t.OldSurvived {
					left++
				}
				if t.Overlaps > 0 {
					overlaps++
				}
			}
			stopped := fmt.Sprintf("%s (%s); %d/%d stopped", chaos.Ms(stop.Median()), chaos.Ms(stop.Max()), len(stop), ran)
			if len(stop) == 0 {
				stopped = fmt.Sprintf("never (0/%d)", ran)
			}
			renewal := "n/a"
			if len(since) > 0 {
				renewal = chaos.Ms(since.Max())
			}
			takeover := "–"
			if len(take) > 0 {
				takeover = fmt.Sprintf("%s; %d/%d", chaos.Ms(take.Median()), len(take), ran)
			}
			rows = append(rows, []string{c.Name(), strings.TrimPrefix(kind, "cut-"), c.TTL.String(), stopped, renewal, takeover,
				fmt.Sprintf("%d/%d", left, ran), fmt.Sprintf("%d/%d", overlaps, ran)})
		}
	}
	return chaos.Table(header, rows)
}

// mib formats bytes in MiB.
func mib(b int64) string {
	if b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
}

// perMinute scales a count over window to one minute.
func perMinute(n int64, window time.Duration) string {
	if window <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f", float64(n)*float64(time.Minute)/float64(window))
}

// cpuShare formats CPU time over window as a share of one core.
func cpuShare(d, window time.Duration) string {
	if window <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f%%", 100*float64(d)/float64(window))
}

// withAnon is a peak resident set with, in brackets, the peak of its
// anonymous part: "18.0 MiB (7.3)".
func withAnon(rss, anon int64) string {
	if rss == 0 {
		return mib(rss)
	}
	return fmt.Sprintf("%s (%.1f)", mib(rss), float64(anon)/(1<<20))
}

// FootprintTable is the idle-cost table.
func (r *Results) FootprintTable() string {
	header := []string{"tool", "leader RSS (anon)", "guard RSS (anon)", "standby RSS (anon)", "leader CPU", "guard CPU", "standby CPU",
		"leader requests/min", "standby requests/min", "leader wake-ups/min", "guard wake-ups/min", "standby wake-ups/min"}
	var rows [][]string
	for _, c := range r.Contenders {
		fp, ok := r.Footprints[c.Name()]
		if !ok {
			continue
		}
		if fp.Err != "" {
			rows = append(rows, []string{c.Name(), "error: " + fp.Err, "", "", "", "", "", "", "", "", "", ""})
			continue
		}
		guardCPU, guardWakes := "–", "–"
		if fp.GuardRSS > 0 {
			guardCPU, guardWakes = cpuShare(fp.GuardCPU, fp.Window), perMinute(fp.GuardWakes, fp.Window)
		}
		rows = append(rows, []string{c.Name(), withAnon(fp.LeaderRSS, fp.LeaderAnon), withAnon(fp.GuardRSS, fp.GuardAnon), withAnon(fp.StandbyRSS, fp.StandbyAnon),
			cpuShare(fp.LeaderCPU, fp.Window), guardCPU, cpuShare(fp.StandbyCPU, fp.Window),
			perMinute(fp.LeaderReqs, fp.Window), perMinute(fp.StandbyReqs, fp.Window),
			perMinute(fp.LeaderWakes, fp.Window), guardWakes, perMinute(fp.StandbyWakes, fp.Window)})
	}
	return chaos.Table(header, rows)
}

// ScaleTable is the many-candidates table.
func (r *Results) ScaleTable() string {
	header := []string{"tool", "candidates", "crash failover: median (max)", "backend requests per failover", "backend requests/min, all candidates", "per candidate", "RSS, all candidates"}
	var rows [][]string
	for _, c := range r.Contenders {
		for _, sp := range r.Scale[c.Name()] {
			if sp.Err != "" {
				msg := sp.Err
				if !strings.HasPrefix(msg, "not run") {
					msg = "error: " + msg
				}
				rows = append(rows, []string{c.Name(), strconv.Itoa(sp.N), msg, "", "", "", ""})
				continue
			}
			fo := "n/a (no standby)"
			if sp.N > 1 {
				d := chaos.Durations(sp.Failovers)
				fo = fmt.Sprintf("%s (%s) of %d", chaos.Ms(d.Median()), chaos.Ms(d.Max()), len(d))
			}
			if sp.Note != "" {
				fo += " (" + firstLine(strings.SplitN(sp.Note, ";", 2)[0]) + ")"
			}
			rows = append(rows, []string{c.Name(), strconv.Itoa(sp.N), fo, perFailover(sp.PerFailover), perMinute(sp.Requests, sp.Window),
				perMinute(sp.Requests/int64(sp.N), sp.Window), mib(sp.RSS)})
		}
	}
	return chaos.Table(header, rows)
}

// perFailover is the median of the requests counted per failover, beside
// the one furthest from it.
func perFailover(v []float64) string {
	if len(v) == 0 {
		return "n/a"
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return fmt.Sprintf("%.0f (%.0f to %.0f)", s[len(s)/2], s[0], s[len(s)-1])
}

// Errors lists the trials that could not run.
func (r *Results) Errors() []string {
	var out []string
	for _, c := range r.Contenders {
		for kind, ts := range r.Trials[c.Name()] {
			for _, t := range ts {
				if t.Err != "" {
					out = append(out, fmt.Sprintf("%s %s: %s", c.Name(), kind, firstLine(t.Err)))
				}
			}
		}
	}
	return out
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
