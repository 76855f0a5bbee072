package leaserow

import (
	"fmt"
	"time"

	"github.com/leaderrun/leaderrun/locker/observe"
)

// standby is what a waiting candidate knows of the key's row across its
// reads (DESIGN §1.12, "hand edits"). It counts, on its own monotonic
// clock, how long the row has stayed exactly as it last read it: any
// change of any field, the row's disappearance included, starts the count
// over from the read that first showed it. That read came after the
// change, hence after the holder's last successful write (every write of
// a holder changes the version, and after a change by someone else no
// renewal of the holder succeeds: renewals are conditioned on every field
// it owns).
//
// The TTL it counts with is the larger of its own and the one the live
// holder declared when the standby first saw its term (a first sight that
// may come after a hand edit lowered it); the row showing a larger one
// later, or a later term's, raises it, a smaller one never lowers it
// until a release frees the key. A term that does not declare the
// contract, written over one that did, frees nothing before floor. A term written over the row without a new epoch is a
// hand edit, not a takeover: the holder seen before still counts. A row deleted, or emptied without
// the Released marker, after a live holder is that holder gone silent:
// the same count with the same TTL (or the standby's own, when larger: a
// term may have come and gone between two reads). Only a release
// (Released) or a fresh
// key (no row, no trace of a holder: Tracer) is free at once.
type standby struct {
	now func() time.Time
	own time.Duration // this candidate's own TTL

	state string    // the row last read, every field; "" before the first read
	since time.Time // when the standby first read state

	term     string        // the last live term seen ("": none seen)
	epoch    uint64        // its epoch
	ttl      time.Duration // the TTL that term declared when first seen, never lowered
	contract bool          // that term declared the observer-clock contract
	traced   bool          // the row is missing and the store showed a trace of a holder

	// floor is when every holder of the contract this standby saw is
	// surely past its deadline: a row that changed while such a holder
	// was the one counted with was read after that holder's last
	// successful write. A later term that does not declare the contract
	// (a row forged by hand) never frees the key before it.
	floor time.Time
}

// verdict is what the standby makes of one read.
type verdict struct {
	free    bool          // take the key now
	forever bool          // a holder without the contract: wait for its release
	silent  bool          // no holder to see: the row was deleted or emptied without a release
	how     string        // for silent: "deleted" or "emptied"
	ttl     time.Duration // the TTL counted with
	left    time.Duration // how long still to wait (<= 0: take the key now)
	told    bool          // the state was seen before (do not log it again)
}

// see takes one read of the row (exists false: there is none) and says
// what to do. traced is asked, once per disappearance of the row, whether
// the key was held before.
func (s *standby) see(cur Row, exists bool, traced func() (bool, error)) (verdict, error) {
	now := s.now()
	state := "none"
	if exists {
		state = fmt.Sprintf("row\x00%s\x00%s\x00%s\x00%d\x00%d\x00%s", cur.Term, cur.HolderRecord, cur.Contract, cur.TTL, cur.Epoch, cur.Version)
	}
	told := state == s.state
	if !told {
		if s.term != "" && s.contract {
			s.floor = later(s.floor, now.Add(s.ttl+observe.Allowance(s.ttl)))
		}
		s.state, s.since, s.traced = state, now, false
		if !exists && s.term == "" {
			t, err := traced()
			if err != nil {
				s.state = "" // ask again at the next read
				return verdict{}, err
			}
			s.traced = t
		}
	}
	wait := func(ttl time.Duration, silent bool, how string) verdict {
		left := s.since.Add(ttl + observe.Allowance(ttl)).Sub(now)
		return verdict{silent: silent, how: how, ttl: ttl, left: left, told: told}
	}
	switch {
	case exists && released(cur):
		s.term, s.floor = "", time.Time{}
		return verdict{free: true}, nil
	case exists && cur.Term != "":
		declares := cur.Contract == observe.Contract && cur.TTL > 0
		switch {
		case s.term == "":
			// The first sight of a term may come after a hand edit
			// lowered its TTL: count with our own too.
			s.term, s.epoch, s.ttl, s.contract = cur.Term, cur.Epoch, max(cur.TTL, s.own), declares
		case cur.Term != s.term && cur.Epoch > s.epoch:
			// A new term: a takeover advanced the epoch. Its TTL only
			// raises the one counted with while this candidate waits.
			s.term, s.epoch, s.ttl, s.contract = cur.Term, cur.Epoch, max(s.ttl, cur.TTL), declares
		default:
			// The same term, or one written over it by hand (no new
			// epoch): what the holder declared first still holds.
			s.ttl = max(s.ttl, cur.TTL)
		}
		if !s.contract {
			// A holder that never declared the contract in this term is
			// never taken over; one that did is, whatever the row says
			// later.
			return verdict{forever: true}, nil
		}
		return wait(s.ttl, false, ""), nil
	}
	how := "deleted"
	if exists {
		how = "emptied"
	}
	switch {
	case s.term != "" && !s.contract:
		// Emptied or deleted after a holder without the contract (another
		// tool): its own release, as it always was, once every holder of
		// the contract seen before it is surely gone.
		if left := s.floor.Sub(now); left > 0 {
			return verdict{silent: true, how: how, ttl: s.ttl, left: left, told: told}, nil
		}
		return verdict{free: true}, nil
	case s.term != "":
		// Our own TTL too: a term that came and went between two of our
		// reads (a takeover, then the edit) declared a TTL we never saw.
		return wait(max(s.ttl, cur.TTL, s.own), true, how), nil
	case !exists && !s.traced:
		return verdict{free: true}, nil // a fresh key
	}
	// A row emptied without the release mark, whatever contract it still
	// names, is no release: only the mark frees a row at once.
	// No holder seen: one may have gone silent just before our first
	// read, declaring a TTL nobody can know now. The row's, or our own.
	return wait(max(cur.TTL, s.own), true, how), nil
}

// later is the later of two times.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
