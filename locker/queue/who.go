package queue

import (
	"encoding/json"
	"os"
	"slices"
	"time"

	"github.com/leaderrun/leaderrun/locker"
)

// Who describes a queued candidate to whoever reads the queue (`leaderrun
// status`): its host, pid, --priority and since when it waits. A
// candidate writes it into its entry beside what the queue's rules read,
// where a leaderrun that does not know it passes over it; the rules never
// read it.
type Who struct {
	Hostname string    `json:"hostname"`
	PID      int       `json:"pid"`
	Priority int       `json:"priority,omitempty"`
	Since    time.Time `json:"since"`
}

// NewWho describes this process, a candidate of opts, waiting from now.
func NewWho(opts locker.Options) Who {
	host, _ := os.Hostname()
	return Who{Hostname: host, PID: os.Getpid(), Priority: opts.Priority, Since: time.Now().UTC().Truncate(time.Millisecond)}
}

// Encode is w as an entry stores it: one line of JSON without spaces
// of its own.
func (w Who) Encode() string {
	b, err := json.Marshal(w)
	if err != nil {
		panic("encode queue entry description: " + err.Error()) // plain data
	}
	return string(b)
}

// ParseWho decodes what Encode wrote; false for anything else.
func ParseWho(s string) (Who, bool) {
	var w Who
	if err := json.Unmarshal([]byte(s), &w); err != nil || w.Hostname == "" && w.PID == 0 {
		return Who{}, false
	}
	return w, true
}

// Listed is one entry of a queue as Listing reads it: the entry, the ID
// of its candidate, and its description when it has one.
type Listed struct {
	Entry
	ID        string
	Who       Who
	Described bool
}

// Listing lists the candidates of a queue in the order they stand in it
// (Rank, then Key), the entries a backend ended left out: what
// locker.Candidates returns for the backends whose waiting candidates
// are the queue's.
func Listing(entries []Listed) []locker.Candidate {
	entries = slices.DeleteFunc(slices.Clone(entries), func(l Listed) bool { return l.Ended })
	slices.SortStableFunc(entries, func(a, b Listed) int {
		switch {
		case before(&a.Entry, &b.Entry):
			return -1
		case before(&b.Entry, &a.Entry):
			return 1
		}
		return 0
	})
	out := make([]locker.Candidate, 0, len(entries))
	for i, e := range entries {
		c := locker.Candidate{ID: e.ID, Place: i, Described: e.Described}
		if e.Described {
			c.Hostname, c.PID, c.Priority, c.Since = e.Who.Hostname, e.Who.PID, e.Who.Priority, e.Who.Since
		}
		out = append(out, c)
	}
	return out
}
