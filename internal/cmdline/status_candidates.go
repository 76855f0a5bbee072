//go:build linux

package cmdline

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/leaderrun/leaderrun/locker"
)

// candidateReport is one candidate waiting for the key, as status reports
// it (JSON "candidates"). Hostname, PID, Priority and Since are null for
// an entry that does not say them: an older leaderrun's (on Consul and
// Kubernetes), or one written by hand.
type candidateReport struct {
	// Place is its place in the order the candidates would win: 0 is
	// the next.
	Place    int        `json:"place"`
	ID       string     `json:"id"`
	Hostname *string    `json:"hostname"`
	PID      *int       `json:"pid"`
	Priority *int       `json:"priority"`
	Since    *time.Time `json:"since"`
}

// How status read the candidates (statusReport.listed).
const (
	candidatesUnread   = iota // not asked (status --holders)
	candidatesListed          // Candidates holds them, maybe none
	candidatesUnlisted        // the backend cannot tell
	candidatesFailed          // the read failed
)

// readCandidates lists the candidates waiting for the key lk campaigns
// for, when its backend can tell (locker.Candidates).
func readCandidates(ctx context.Context, lk locker.Locker) (cs []locker.Candidate, listed bool, err error) {
	lc, ok := locker.CandidatesOf(lk)
	if !ok {
		return nil, false, nil
	}
	cs, err = lc.Candidates(ctx)
	return cs, true, err
}

// withCandidates adds the candidates read with the key's holder. A list
// that cannot be read leaves it out, not the status.
func (r *statusReport) withCandidates(read leaderRead) {
	switch {
	case read.CandidatesErr != nil:
		r.listed = candidatesFailed // said by status on stderr (sayCandidatesUnread)
	case !read.CandidatesListed:
		r.listed = candidatesUnlisted
	default:
		r.listed = candidatesListed
		r.Candidates = candidateReports(read.Candidates)
	}
}

// candidateReports turns what Candidates listed into the report's list:
// never nil, so that JSON says [] when nobody waits.
func candidateReports(cs []locker.Candidate) []candidateReport {
	out := make([]candidateReport, 0, len(cs))
	for _, c := range cs {
		cr := candidateReport{Place: c.Place, ID: c.ID}
		if c.Described {
			host, pid, prio := c.Hostname, c.PID, c.Priority
			cr.Hostname, cr.PID, cr.Priority = &host, &pid, &prio
		}
		if !c.Since.IsZero() {
			since := c.Since.UTC()
			cr.Since = &since
		}
		out = append(out, cr)
	}
	return out
}

// Widths the candidates' table cuts its columns to, so that a line stays
// within 80 columns, whatever an entry says; JSON has them whole. A PID
// has at most 7 digits, a --priority 4, a time of RFC 3339 in UTC 20
// characters.
const (
	candidateIDWidth    = 16
	candidateHostWidth  = 16
	candidatePIDWidth   = 7
	candidatePrioWidth  = 4
	candidateSinceWidth = 20
)

// writeCandidates prints the candidates' section under the leader table:
// one line per candidate (place, id, host, pid, priority, waiting since),
// or one saying why there is none.
func (r statusReport) writeCandidates(w io.Writer) error {
	var err error
	switch {
	case r.listed == candidatesUnread:
	case r.listed == candidatesUnlisted:
		_, err = fmt.Fprintln(w, "candidates: not listed by this backend")
	case r.listed == candidatesFailed:
		_, err = fmt.Fprintln(w, "candidates: could not be read")
	case len(r.Candidates) == 0:
		_, err = fmt.Fprintln(w, "candidates: none waiting")
	case unorderedCandidates[r.Backend]:
		fmt.Fprintf(w, "candidates: %d waiting, as they began (the lock keeps no queue)\n", len(r.Candidates))
		err = r.candidateLines(w)
	default:
		fmt.Fprintf(w, "candidates: %d waiting, the next first\n", len(r.Candidates))
		err = r.candidateLines(w)
	}
	return err
}

// unorderedCandidates are the backends whose waiting candidates win in no
// order (the local flock: whichever tries first after a release): their
// places are the order in which the candidates began to wait.
var unorderedCandidates = map[string]bool{"local": true}

// candidateLines prints one line per candidate.
func (r statusReport) candidateLines(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  #\tID\tHOST\tPID\tPRIO\tWAITING SINCE")
	for _, c := range r.Candidates {
		host, pid, prio, since := "-", "-", "-", "-"
		if c.Hostname != nil {
			host = cut(printable(orUnknown(*c.Hostname)), candidateHostWidth)
		}
		if c.PID != nil {
			pid = cut(strconv.Itoa(*c.PID), candidatePIDWidth)
		}
		if c.Priority != nil {
			prio = cut(strconv.Itoa(*c.Priority), candidatePrioWidth)
		}
		if c.Since != nil {
			since = cut(c.Since.Format(time.RFC3339), candidateSinceWidth)
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\n", c.Place, cut(printable(c.ID), candidateIDWidth), host, pid, prio, since)
	}
	return tw.Flush()
}

// cut shortens s to n runes, the last of them "…" when it was longer.
func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// sayCandidatesUnread says on stderr why the candidates could not be listed,
// once per status (status --watch shows the failure as a change instead).
func sayCandidatesUnread(read leaderRead) {
	if read.CandidatesErr != nil {
		fmt.Fprintf(errorOutput(), "leaderrun: the candidates waiting for the key could not be read: %s\n", oneLine(read.CandidatesErr))
	}
}
