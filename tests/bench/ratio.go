//go:build linux

package bench

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/leaderrun/leaderrun/tests/chaos"
)

// A figure is one number a contender has in a run, lower is better.
type figure struct {
	name string
	// value is the contender's figure and whether it has one.
	value func(r *Results, c *Contender) (float64, string, bool)
}

// medianOf is the median failover of the trials of kind that handed off.
func medianOf(kind string) func(r *Results, c *Contender) (float64, string, bool) {
	return func(r *Results, c *Contender) (float64, string, bool) {
		d, ok, _ := handoffs(r.Trials[c.Name()][kind])
		if ok == 0 {
			return 0, "", false
		}
		m := d.Median()
		return float64(m), chaos.Ms(m), true
	}
}

// rss is a footprint's resident set: the leader's with its guard, or the
// standby's.
func rss(leader bool) func(r *Results, c *Contender) (float64, string, bool) {
	return func(r *Results, c *Contender) (float64, string, bool) {
		fp, ok := r.Footprints[c.Name()]
		if !ok || fp.Err != "" {
			return 0, "", false
		}
		v := fp.StandbyRSS
		if leader {
			v = fp.LeaderRSS + fp.GuardRSS
		}
		if v == 0 {
			return 0, "", false
		}
		return float64(v), mib(v), true
	}
}

// ratioFigures are the figures the summary compares.
var ratioFigures = []figure{
	{"crash failover (median)", medianOf(KindCrash)},
	{"graceful handoff (median)", medianOf(KindGraceful)},
	{"standby's child after a refused cut (median)", medianOf(KindRefuse)},
	{"standby's child after a blackholed cut (median)", medianOf(KindBlackhole)},
	{"leader RSS (leaderrun: with its guard)", rss(true)},
	{"standby RSS", rss(false)},
}

// RatioTable is the summary: for each backend with a rival, leaderrun's
// figures as a ratio to the best rival configuration's in the same run
// (each figure's best on its own: the lowest), with both figures and the
// rival it was. Below 1, leaderrun is the faster or smaller.
func (r *Results) RatioTable() string {
	header := []string{"backend"}
	for _, f := range ratioFigures {
		header = append(header, f.name)
	}
	var rows [][]string
	var backends []string
	for _, c := range r.Contenders {
		if !slices.Contains(backends, c.Backend) {
			backends = append(backends, c.Backend)
		}
	}
	for _, be := range backends {
		var lr *Contender
		var rivals []*Contender
		for _, c := range r.Contenders {
			switch {
			case c.Backend != be:
			case c.Leaderrun:
				lr = c
			default:
				rivals = append(rivals, c)
			}
		}
		if lr == nil || len(rivals) == 0 {
			continue
		}
		row := []string{be}
		for _, f := range ratioFigures {
			row = append(row, ratioCell(r, f, lr, rivals))
		}
		rows = append(rows, row)
	}
	if len(rows) == 0 {
		return "(no backend had a rival in this run)\n"
	}
	return chaos.Table(header, rows)
}

// ratioCell is one figure's ratio to the best rival's.
func ratioCell(r *Results, f figure, lr *Contender, rivals []*Contender) string {
	v, vs, ok := f.value(r, lr)
	if !ok {
		return "–"
	}
	var best *Contender
	var bv float64
	var bs string
	for _, c := range rivals {
		if x, xs, ok := f.value(r, c); ok && (best == nil || x < bv) {
			best, bv, bs = c, x, xs
		}
	}
	if best == nil {
		return "no rival figure (" + vs + ")"
	}
	return fmt.Sprintf("%s: %s / %s (%s)", ratio(v/bv), vs, bs, best.Name())
}

// ratio formats a ratio with two significant digits.
func ratio(x float64) string {
	return "×" + strconv.FormatFloat(x, 'g', 2, 64)
}
