package fence

import (
	"fmt"
	"time"
)

// Overlap is two writer processes whose writes interleaved: First wrote,
// then Second, then First again.
type Overlap struct {
	First, Second Instance
	// At is the write that showed the overlap.
	At Mono
}

// String says who wrote after whom.
func (o Overlap) String() string {
	return fmt.Sprintf("%s (epoch %d) wrote again after %s (epoch %d) had written", o.First.Name(), o.First.Epoch, o.Second.Name(), o.Second.Epoch)
}

// Result is what one window of the record shows.
type Result struct {
	// Writes, Accepted and Rejected count the window's write attempts.
	Writes, Accepted, Rejected int
	// Overlaps are accepted writes of two processes that interleaved: the
	// resource saw two leaders. Must be empty.
	Overlaps []Overlap
	// LiveOverlaps are write attempts, accepted or not, of two processes
	// that interleaved: two children ran at once.
	LiveOverlaps []Overlap
	// Regressions are accepted writes whose epoch is lower than one
	// accepted before. Must be zero.
	Regressions int
	// SharedEpochs name epochs above 0 accepted from two processes: an
	// epoch must belong to one leadership. Must be empty.
	SharedEpochs []string
	// Stale counts write attempts whose epoch was below the highest
	// accepted before them; StaleAccepted those of them the fence let
	// through (must be zero).
	Stale, StaleAccepted int
	// Started lists the processes that said hello in this window.
	Started []Instance
	// MaxGap is the longest time between two consecutive accepted writes,
	// counting from the last accepted write before the window; GapFrom is
	// where it began.
	MaxGap  time.Duration
	GapFrom Mono
}

// Checker reads the record window by window and keeps what it needs to
// judge later windows: which processes are done writing, the highest epoch,
// who owns each epoch.
type Checker struct {
	highest    uint64
	accepted   tracker
	live       tracker
	owner      map[uint64]int
	lastAt     Mono
	seenHellos int
}

// tracker finds interleavings in a sequence of writes by process.
type tracker struct {
	cur      int
	finished map[int]bool
	reported map[[2]int]bool
}

// NewChecker returns a checker that has seen nothing yet.
func NewChecker() *Checker {
	return &Checker{
		accepted: tracker{cur: -1, finished: map[int]bool{}, reported: map[[2]int]bool{}},
		live:     tracker{cur: -1, finished: map[int]bool{}, reported: map[[2]int]bool{}},
		owner:    map[uint64]int{},
	}
}

// see records that instance id wrote; it returns the instance it overlaps
// with, or -1.
func (t *tracker) see(id int) int {
	if id == t.cur {
		return -1
	}
	prev := t.cur
	if prev >= 0 {
		t.finished[prev] = true
	}
	t.cur = id
	pair := [2]int{min(id, prev), max(id, prev)} // one report per pair
	if t.finished[id] && prev >= 0 && !t.reported[pair] {
		t.reported[pair] = true
		return prev
	}
	return -1
}

// Feed judges the writes of l, which must be the writes that followed those
// of the previous Feed (Server.Log(from) with from the previous Len).
func (c *Checker) Feed(l Log) Result {
	var r Result
	r.Started = append(r.Started, l.Instances[min(c.seenHellos, len(l.Instances)):]...)
	c.seenHellos = len(l.Instances)
	last := c.lastAt
	for _, w := range l.Writes {
		r.Writes++
		if w.Epoch < c.highest {
			r.Stale++
			if w.Accepted {
				r.StaleAccepted++
			}
		}
		if o := c.live.see(w.Instance); o >= 0 {
			r.LiveOverlaps = append(r.LiveOverlaps, Overlap{First: l.Instances[w.Instance], Second: l.Instances[o], At: w.At})
		}
		if !w.Accepted {
			r.Rejected++
			continue
		}
		r.Accepted++
		if w.Epoch < c.highest {
			r.Regressions++
		}
		c.highest = max(c.highest, w.Epoch)
		if w.Epoch > 0 {
			if prev, ok := c.owner[w.Epoch]; ok && prev != w.Instance {
				r.SharedEpochs = append(r.SharedEpochs, fmt.Sprintf("epoch %d: %s and %s", w.Epoch, l.Instances[prev].Name(), l.Instances[w.Instance].Name()))
			}
			c.owner[w.Epoch] = w.Instance
		}
		if o := c.accepted.see(w.Instance); o >= 0 {
			r.Overlaps = append(r.Overlaps, Overlap{First: l.Instances[w.Instance], Second: l.Instances[o], At: w.At})
		}
		if last != 0 && w.At.Sub(last) > r.MaxGap {
			r.MaxGap, r.GapFrom = w.At.Sub(last), last
		}
		last = w.At
	}
	c.lastAt = last
	return r
}

// Handoff is one change of writer process: the previous process's end and
// the next one's start.
type Handoff struct {
	From, To Instance
	// Gap is To's start minus From's death, as the fence saw the death
	// (its connection closing). The death is seen a little late, never
	// early, so Gap errs on the small side.
	Gap time.Duration
	// FromAlive is To's own check at its start: From was still alive.
	FromAlive bool
}

// Handoffs pairs every instance with the one before it.
func Handoffs(instances []Instance) []Handoff {
	var out []Handoff
	for i := 1; i < len(instances); i++ {
		from, to := instances[i-1], instances[i]
		h := Handoff{From: from, To: to, FromAlive: to.PrevAlive()}
		if from.Closed != 0 {
			h.Gap = to.Started.Sub(from.Closed)
		} else {
			h.Gap = to.Started.Sub(Now()) // still connected: an overlap so far
		}
		out = append(out, h)
	}
	return out
}
