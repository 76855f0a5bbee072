package queue

import (
	"math"
	"sync/atomic"
)

// Unknown is the count of a candidate that has not read the queue since
// it joined at the tail.
const Unknown = math.MaxInt64

// Place is what a waiting candidate knows of its place: how many live
// entries are ahead of its own, which only falls, and what its last write
// of its entry said. It is safe for concurrent use. The zero value is not
// ready: use NewPlace.
type Place struct{ ahead, said atomic.Int64 }

// NewPlace returns the place of a candidate that has just joined at the tail.
func NewPlace() *Place {
	p := &Place{}
	p.Reset()
	return p
}

// Reset forgets the place, for an entry written afresh at the tail.
func (p *Place) Reset() {
	p.ahead.Store(Unknown)
	p.said.Store(Unknown)
}

// Lower records that at most n live entries are ahead of ours.
func (p *Place) Lower(n int64) {
	for {
		cur := p.ahead.Load()
		if cur <= n || p.ahead.CompareAndSwap(cur, n) {
			return
		}
	}
}

// Ahead is how many live entries are known ahead of ours (Unknown when
// none is known).
func (p *Place) Ahead() int64 { return p.ahead.Load() }

// Near reports whether the candidate knows it is the head or right behind
// it.
func (p *Place) Near() bool { return p.Ahead() <= 1 }

// Said records that a write of the entry declared n ahead.
func (p *Place) Said(n int64) { p.said.Store(n) }

// News returns the count ahead, and whether it is a place near the head
// that no write has declared yet: the entry is to be written at once, so
// that its successor judges it by the near rule from now on.
func (p *Place) News() (ahead int64, news bool) {
	ahead = p.Ahead()
	return ahead, ahead <= 1 && p.said.Load() != ahead
}
