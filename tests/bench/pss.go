//go:build linux

package bench

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/leaderrun/leaderrun/tests/chaos"
)

// PSSMemory is what one process costs the host, in bytes: its
// proportional set size (the pages only it maps, plus each shared page
// divided by the number of processes mapping it: the binary's pages are
// shared by every leaderrun on the host started from the same file) and
// its anonymous part (heap, stacks and runtime data, which nothing
// shares).
type PSSMemory struct {
	PSS     int64 // Pss: in /proc/PID/smaps_rollup
	PSSAnon int64 // Pss_Anon: in /proc/PID/smaps_rollup
	Anon    int64 // RssAnon: in /proc/PID/status
}

// readPSS reads pid's PSS and anonymous memory.
func readPSS(pid int) (PSSMemory, error) {
	kb, err := chaos.ProcKB(pid, "smaps_rollup", "Pss", "Pss_Anon")
	if err != nil {
		return PSSMemory{}, err
	}
	r, err := chaos.Resident(pid)
	if err != nil {
		return PSSMemory{}, err
	}
	return PSSMemory{PSS: kb["Pss"], PSSAnon: kb["Pss_Anon"], Anon: r.Anon}, nil
}

// PSSPoint is N leaderruns of one key on one host, idle: one leader
// with its guard and N-1 standbys, each process's peak over Window.
type PSSPoint struct {
	N      int
	Window time.Duration
	Leader PSSMemory
	Guard  PSSMemory
	// Standby is the median of the standbys' peaks (each field on its
	// own); StandbyMax the largest PSS of a standby.
	Standby    PSSMemory
	StandbyMax int64
	Standbys   int
	// Total is the sum of every process's peak PSS.
	Total int64
	Err   string
}

// FootprintPSS starts n candidates of leaderrun contender c on one key
// through shared proxies, lets them settle (leaderrun trims its start-up
// pages 2s and 30s after start), and samples every process's PSS and
// anonymous memory every second over window, keeping each one's peak.
func (e *Env) FootprintPSS(c *Contender, n int, window time.Duration) PSSPoint {
	pt := PSSPoint{N: n, Window: window}
	ln, err := e.NewLane(c, true)
	if err != nil {
		pt.Err = err.Error()
		return pt
	}
	defer ln.Close()
	if err := ln.Start(); err != nil {
		pt.Err = err.Error()
		return pt
	}
	for i := 1; i < n; i++ {
		if _, err := ln.spawn(nil); err != nil {
			pt.Err = err.Error()
			return pt
		}
	}
	deadline := time.Now().Add(3 * startTimeout)
	for {
		ids, err := ln.members()
		if err == nil && len(ids) >= n {
			break
		}
		if time.Now().After(deadline) {
			pt.Err = fmt.Sprintf("only %d of %d candidates registered within %v (%v)%s", len(ids), n, 3*startTimeout, err, ln.exited())
			return pt
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(min(window, footprintSettle))
	leader, guard := 0, 0
	var standbys []int
	if in, ok := ln.newest(); ok {
		for _, cand := range ln.all {
			if cand.ID == in.Writer {
				leader = cand.Proc.Pid()
			} else {
				standbys = append(standbys, cand.Proc.Pid())
			}
		}
	}
	if leader == 0 {
		pt.Err = "no leader"
		return pt
	}
	for _, p := range chaos.Scan(e.Bins.Leaderrun, e.Bins.Guard) {
		if p.IsGuard() && p.PPid == leader {
			guard = p.Pid
		}
	}
	peaks := map[int]*PSSMemory{}
	end := time.Now().Add(window)
	for time.Now().Before(end) {
		for _, pid := range append([]int{leader, guard}, standbys...) {
			if pid == 0 {
				continue
			}
			m, err := readPSS(pid)
			if err != nil {
				continue
			}
			p := peaks[pid]
			if p == nil {
				p = &PSSMemory{}
				peaks[pid] = p
			}
			p.PSS, p.PSSAnon, p.Anon = max(p.PSS, m.PSS), max(p.PSSAnon, m.PSSAnon), max(p.Anon, m.Anon)
		}
		time.Sleep(time.Second) // sampling pace
	}
	if ln.exited() != "" {
		pt.Err = "a candidate exited during the window" + ln.exited()
		return pt
	}
	peak := func(pid int) PSSMemory {
		if p := peaks[pid]; p != nil {
			return *p
		}
		return PSSMemory{}
	}
	pt.Leader, pt.Guard = peak(leader), peak(guard)
	var pss, pssAnon, anon []int64
	for _, pid := range standbys {
		p := peak(pid)
		pss, pssAnon, anon = append(pss, p.PSS), append(pssAnon, p.PSSAnon), append(anon, p.Anon)
	}
	pt.Standbys = len(standbys)
	if len(pss) > 0 {
		med := func(xs []int64) int64 { slices.Sort(xs); return xs[len(xs)/2] }
		pt.StandbyMax = slices.Max(pss)
		pt.Standby = PSSMemory{PSS: med(pss), PSSAnon: med(pssAnon), Anon: med(anon)}
	}
	for _, p := range peaks {
		pt.Total += p.PSS
	}
	return pt
}

// The targets the PSS table is read against (docs/BENCHMARKS.md, "PSS
// with 10 instances"): reported, never asserted.
const (
	pssTargetStandby     = 8 << 20
	pssTargetLeaderGuard = 12 << 20
)

// PSSTable is the PSS table: one row per backend.
func PSSTable(cs []*Contender, pts map[string]PSSPoint) string {
	header := []string{"backend", "instances", "leader PSS (anon)", "guard PSS (anon)", "leader + guard PSS (target 12)",
		"standby PSS (anon), median (target 8)", "standby PSS, max", "all processes PSS"}
	mib := func(n int64) string { return fmt.Sprintf("%.1f", float64(n)/(1<<20)) }
	with := func(m PSSMemory) string {
		if m.PSS == 0 {
			return "–"
		}
		return fmt.Sprintf("%s (%s)", mib(m.PSS), mib(m.Anon))
	}
	over := func(n, target int64) string {
		if n > target {
			return ", over by " + mib(n-target)
		}
		return ""
	}
	mark := func(n, target int64) string { return mib(n) + over(n, target) }
	var rows [][]string
	for _, c := range cs {
		pt, ok := pts[c.Name()]
		if !ok {
			continue
		}
		if pt.Err != "" {
			rows = append(rows, []string{c.Backend, strconv.Itoa(pt.N), "error: " + firstLine(pt.Err), "", "", "", "", ""})
			continue
		}
		rows = append(rows, []string{c.Backend, strconv.Itoa(pt.N), with(pt.Leader), with(pt.Guard),
			mark(pt.Leader.PSS+pt.Guard.PSS, pssTargetLeaderGuard),
			with(pt.Standby) + over(pt.Standby.PSS, pssTargetStandby), mib(pt.StandbyMax), mib(pt.Total)})
	}
	return chaos.Table(header, rows)
}
