//go:build linux

package cmdline

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
)

// The candidates' section: one line per candidate under the leader table,
// "-" for what an older release's entry does not say, nothing read from
// the backend sent to the terminal as is, no line over 80 columns; JSON
// null where the backend cannot tell.
func TestCandidatesReport(t *testing.T) {
	since := time.Date(2026, 12, 7, 13, 0, 5, 0, time.FixedZone("x", 3600))
	long := strings.Repeat("n", 253)
	cs := []locker.Candidate{
		{ID: "node-b", Place: 0, Described: true, Hostname: "host-b", PID: 4242, Priority: 5, Since: since},
		{ID: "old\x1b[2Jnode", Place: 1},
		{ID: long, Place: 2, Described: true, Hostname: long, PID: 4194304, Priority: 1000, Since: since},
		// Written by hand: numbers no leaderrun writes.
		{ID: "x", Place: 3, Described: true, Hostname: "h", PID: 123456789, Priority: -123456},
	}
	cases := []struct {
		name    string
		backend string // etcd when empty
		read    leaderRead
		text    []string
		json    string
	}{
		{
			name: "listed",
			read: leaderRead{Candidates: cs, CandidatesListed: true},
			text: []string{
				"candidates: 4 waiting, the next first",
				"  #  ID                HOST              PID      PRIO  WAITING SINCE",
				"  0  node-b            host-b            4242     5     2026-12-07T12:00:05Z",
				`  1  old\x1b[2Jnode    -                 -        -     -`,
				"  2  nnnnnnnnnnnnnnn…  nnnnnnnnnnnnnnn…  4194304  1000  2026-12-07T12:00:05Z",
				"  3  x                 h                 123456…  -12…  -",
			},
			json: `[{"place":0,"id":"node-b","hostname":"host-b","pid":4242,"priority":5,"since":"2026-12-07T12:00:05Z"},` +
				`{"place":1,"id":"old\u001b[2Jnode","hostname":null,"pid":null,"priority":null,"since":null},`,
		},
		{
			name: "local", backend: "local",
			read: leaderRead{Candidates: cs[:1], CandidatesListed: true},
			text: []string{
				"candidates: 1 waiting, as they began (the lock keeps no queue)",
				"  #  ID      HOST    PID   PRIO  WAITING SINCE",
				"  0  node-b  host-b  4242  5     2026-12-07T12:00:05Z",
			},
			json: `"candidates":[{"place":0,`,
		},
		{
			name: "none waiting",
			read: leaderRead{Candidates: []locker.Candidate{}, CandidatesListed: true},
			text: []string{"candidates: none waiting"},
			json: `"candidates":[]`,
		},
		{
			name: "not listed",
			read: leaderRead{},
			text: []string{"candidates: not listed by this backend"},
			json: `"candidates":null`,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			backend := c.backend
			if backend == "" {
				backend = "etcd"
			}
			r, err := newStatusReport("k", backend, locker.Holder{ID: "a:1", Hostname: "a", PID: 1, Epoch: 42}, nil)
			if err != nil {
				t.Fatal(err)
			}
			r.withCandidates(c.read)
			var out strings.Builder
			if err := r.writeText(&out, since); err != nil {
				t.Fatal(err)
			}
			text := out.String()
			if !strings.HasPrefix(text, "key       k\n") || !strings.Contains(text, "leader    a:1\n") {
				t.Errorf("the leader table changed:\n%s", text)
			}
			i := strings.Index(text, "candidates:")
			if i < 0 || !strings.Contains(text[:i], "epoch     42\n") {
				t.Fatalf("no candidates' section under the leader table:\n%s", text)
			}
			if got, want := text[i:], strings.Join(c.text, "\n")+"\n"; got != want {
				t.Errorf("candidates' section\n got %q\nwant %q", got, want)
			}
			for _, line := range strings.Split(text, "\n") {
				if n := len([]rune(line)); n > 80 {
					t.Errorf("line of %d columns: %q", n, line)
				}
			}
			b, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), c.json) {
				t.Errorf("json lacks %s:\n%s", c.json, b)
			}
		})
	}
}
