package locker

import (
	"context"
	"time"
)

// Candidate is one candidate waiting for a key, as Candidates lists it.
type Candidate struct {
	// ID is the candidate's --id.
	ID string
	// Place is its place in the order the candidates would win: 0 is
	// the next.
	Place int
	// Described is true when the candidate's entry says who it is:
	// Hostname, PID, Priority and Since are then its own. An entry of an
	// older leaderrun, or one written by hand, leaves it false: only ID
	// and Place are known.
	Described bool
	Hostname  string
	PID       int
	// Priority is its --priority (0 when unset).
	Priority int
	// Since is when it started waiting, by its own clock (zero when not
	// known).
	Since time.Time
}

// Candidates is the capability of a backend whose waiting candidates
// leave an entry that a reader can list (etcd's election keys,
// ZooKeeper's sequential znodes, the queue entries of Consul and
// Kubernetes, the local backend's waiting records). A backend's Locker
// implements it next to Locker; find it with As[Candidates]. A backend
// that does not implement it cannot tell who waits.
type Candidates interface {
	// Candidates lists the candidates waiting for the key, the leader
	// excluded, in the order they would win (Place 0 first; where they
	// win in no order, the local flock, the order they began to wait),
	// with a linearizable read where the backend has one. Only candidates that
	// campaign are listed: one held back by its failing --health-cmd, a
	// pause or a step-down reserved for another withdraws its entry. A
	// key nobody waits for gives an empty slice.
	Candidates(ctx context.Context) ([]Candidate, error)
}

// CandidatesOf returns the Candidates of a backend, looking through
// wrappers.
func CandidatesOf(l Locker) (Candidates, bool) { return As[Candidates](l) }

// CandidateOf describes a waiting candidate from the holder record its
// entry stores (etcd, ZooKeeper): the record's AcquiredAt is when it
// entered the election. A value that is not a holder record gives an
// undescribed candidate named by the raw value.
func CandidateOf(value []byte, place int) Candidate {
	h := ParseHolder(value)
	c := Candidate{ID: h.ID, Place: place}
	if h.Hostname != "" || h.PID != 0 {
		c.Described = true
		c.Hostname, c.PID, c.Priority, c.Since = h.Hostname, h.PID, h.Priority, h.AcquiredAt
	}
	return c
}
