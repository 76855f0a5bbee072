//go:build linux

package cmdline

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
)

// watchReport is a report of key k on etcd led by id with epoch, and
// left seconds of lease.
func watchReport(id string, epoch uint64, left float64) statusReport {
	at := time.Date(2026, 12, 7, 14, 0, 0, 0, time.UTC)
	return statusReport{Key: "k", Backend: "etcd", Leader: &leaderReport{ID: id, Hostname: "h-" + id, PID: 4411, Epoch: epoch, AcquiredAt: &at, LeaseRemainingSeconds: &left}}
}

// watchOutput feeds reports (or, where errs says, a failed read) to a
// watcher and returns the texts of the lines it printed.
func watchOutput(t *testing.T, json bool, reads ...any) (lines []string, errOut string) {
	t.Helper()
	var out, eo bytes.Buffer
	w := &watcher{json: json, out: &out, errOut: &eo}
	now := time.Date(2026, 12, 7, 14, 2, 3, 0, time.UTC)
	for _, r := range reads {
		switch r := r.(type) {
		case statusReport:
			w.observe(now, r, nil, nil)
		case error:
			w.observe(now, statusReport{}, nil, r)
		}
		now = now.Add(time.Second)
	}
	for _, l := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		if l != "" {
			lines = append(lines, l)
		}
	}
	return lines, eo.String()
}

// TestWatchChanges: the same report twice, or one whose only change is
// the lease left, prints nothing; a new term, a pause, its end and an
// outage each print one line that says what changed.
func TestWatchChanges(t *testing.T) {
	t.Parallel()
	a := watchReport("web-1", 11, 9)
	lines, _ := watchOutput(t, false, a, a, watchReport("web-1", 11, 4.5), watchReport("web-1", 11, 8))
	if want := []string{"2026-12-07T14:02:03Z leader web-1 (host h-web-1, pid 4411) epoch 11"}; strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("same term, lease left changing: %q, want %q", lines, want)
	}

	paused := watchReport("web-1", 11, 3)
	paused.Paused = &locker.Pause{By: "ops@a", Since: time.Date(2026, 12, 7, 14, 1, 0, 0, time.UTC), Reason: "db upgrade"}
	none := statusReport{Key: "k", Backend: "etcd", Paused: paused.Paused}
	b := watchReport("web-2", 12, 9)
	down := errors.New("dial tcp 127.0.0.1:2379: connection refused")
	lines, _ = watchOutput(t, false, a, paused, none, none, b, b, down, down, down, b, watchReport("web-2", 12, 1))
	want := []string{
		"2026-12-07T14:02:03Z leader web-1 (host h-web-1, pid 4411) epoch 11",
		"2026-12-07T14:02:04Z paused: db upgrade (by ops@a since 2026-12-07T14:01:00Z)",
		"2026-12-07T14:02:05Z no leader (was web-1 epoch 11)",
		"2026-12-07T14:02:07Z leader web-2 (host h-web-2, pid 4411) epoch 12 (was no leader); resumed",
		"2026-12-07T14:02:09Z cannot read the backend, still watching: dial tcp 127.0.0.1:2379: connection refused",
		"2026-12-07T14:02:12Z backend readable again: leader web-2 (host h-web-2, pid 4411) epoch 12",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}

	// A holder without its epoch yet is shown once it has it, or when
	// it still has none at the next read.
	none = statusReport{Key: "k", Backend: "local"}
	lines, _ = watchOutput(t, false, none, watchReport("web-2", 0, 0), watchReport("web-2", 12, 0), watchReport("pid 7 (flock), not a leaderrun", 0, 0), watchReport("pid 7 (flock), not a leaderrun", 0, 0))
	want = []string{
		"2026-12-07T14:02:03Z no leader",
		"2026-12-07T14:02:05Z leader web-2 (host h-web-2, pid 4411) epoch 12 (was no leader)",
		"2026-12-07T14:02:07Z leader pid 7 (flock), not a leaderrun (host h-pid 7 (flock), not a leaderrun, pid 4411) epoch 0 (was web-2 epoch 12)",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}

	// A record's text is shown printable: no escape reaches the terminal.
	evil := watchReport("x\x1b[2J\nforged line", 13, 5)
	lines, _ = watchOutput(t, false, a, evil)
	if len(lines) != 2 || !strings.Contains(lines[1], `x\x1b[2J\nforged line`) {
		t.Errorf("a holder id with escapes: %q", lines)
	}
}

// TestWatchJSONLines: with --json each change is one line holding the
// whole status and its time; the same state again prints nothing, and an
// outage goes to stderr, once.
func TestWatchJSONLines(t *testing.T) {
	t.Parallel()
	a, b := watchReport("web-1", 11, 9), watchReport("web-2", 12, 9)
	down := errors.New("timeout")
	lines, errOut := watchOutput(t, true, a, watchReport("web-1", 11, 2), down, down, b)
	if len(lines) != 2 {
		t.Fatalf("JSON Lines: %q, want 2", lines)
	}
	for i, id := range []string{"web-1", "web-2"} {
		var doc struct {
			Time   time.Time `json:"time"`
			Key    string    `json:"key"`
			Leader struct {
				ID    string `json:"id"`
				Epoch uint64 `json:"epoch"`
			} `json:"leader"`
		}
		if err := json.Unmarshal([]byte(lines[i]), &doc); err != nil || doc.Time.IsZero() || doc.Key != "k" || doc.Leader.ID != id {
			t.Errorf("line %d: %q (%v), want leader %s and a time", i, lines[i], err, id)
		}
	}
	if !regexp.MustCompile(`^leaderrun: cannot read the backend, still watching: timeout\n$`).MatchString(errOut) {
		t.Errorf("stderr %q, want one line about the outage", errOut)
	}
}

// TestWatchNewFields: a field the watch does not word still counts as a
// change when its value does, except the fields that change by
// themselves at any depth.
func TestWatchNewFields(t *testing.T) {
	t.Parallel()
	a := watchReport("web-1", 11, 9)
	ttl := 30.0
	b := watchReport("web-1", 11, 3)
	b.Leader.LeaseTTLSeconds = &ttl
	b.Holders, b.Slots = 2, []slotReport{{Slot: 1, Leader: watchReport("web-3", 4, 7).Leader}}
	c := b
	c.Slots = []slotReport{{Slot: 1, Leader: watchReport("web-3", 4, 2).Leader}}
	if !changed(a, b) || changed(b, c) {
		t.Errorf("changed(a, b) = %v, want true (slots); changed(b, c) = %v, want false (lease left)", changed(a, b), changed(b, c))
	}
	if got := describeChange(&a, b); !strings.Contains(got, "slot 1 web-3 epoch 4") {
		t.Errorf("describeChange: %q, want the slots", got)
	}

	// A field added to the report later (here: "future") is a change
	// and is shown, without the watch knowing it.
	with := func(r statusReport, candidates string) map[string]string {
		f := fields(r)
		f["future"] = candidates
		return f
	}
	one, two := `[{"id":"web-1"}]`, `[{"id":"web-1"},{"id":"web-2"}]`
	if !fieldsDiffer(with(c, one), with(c, two)) || fieldsDiffer(with(c, one), with(c, one)) {
		t.Errorf("a new field's change is not seen, or its sameness is")
	}
	if got := describeFields(&c, c, with(c, one), with(c, two)); got != "future: "+two {
		t.Errorf("describeFields of a new field: %q", got)
	}
	if got := describeFields(nil, c, nil, with(c, "[]")); strings.Contains(got, "future") {
		t.Errorf("the state in full shows an empty new field: %q", got)
	}
}

// TestWatchBadInput: --interval below its minimum or without --watch, and
// --watch with --holders, are one line naming the flag, exit 125, and
// nothing left running.
func TestWatchBadInput(t *testing.T) {
	t.Parallel()
	local := []string{"status", "--backend", "local", "--lock-dir", t.TempDir()}
	for _, c := range []struct {
		args []string
		line string
	}{
		{[]string{"--watch", "--interval", "50ms", "k"}, "leaderrun: --interval must be at least 100ms, got 50ms\n"},
		{[]string{"--interval", "2s", "k"}, "leaderrun: --interval needs --watch: plain status reads the key once\n"},
		{[]string{"--watch", "--holders", "3", "k"}, "leaderrun: --watch does not take --holders: status --watch of a key run with --holders already shows each slot\n"},
	} {
		code, out, errOut := leaderrunWithin(t, 20*time.Second, nil, append(local, c.args...)...)
		if code != 125 || out != "" || errOut != c.line {
			t.Errorf("status %q: exit %d, %q %q; want 125 and %q", c.args, code, out, errOut, c.line)
		}
	}
}

// TestWatchSignals: status --watch writes its first line through a pipe
// at once (a key never used: it says so and waits), and SIGTERM or
// SIGINT ends it with exit 0.
func TestWatchSignals(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		cmd := exec.Command(os.Args[0], "status", "--watch", "--backend", "local", "--lock-dir", t.TempDir(), "billing")
		cmd.Env = []string{"LEADERRUN_TEST_RUN_MAIN=1", "PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var errOut bytes.Buffer
		cmd.Stderr = &errOut
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// A watch that never prints is killed, not waited for.
		stuck := time.AfterFunc(30*time.Second, func() { _ = cmd.Process.Kill() })
		line, err := bufio.NewReader(out).ReadString('\n')
		stuck.Stop()
		if err != nil || !strings.Contains(line, `no leader: key "billing" was never used at`) {
			_ = cmd.Process.Kill()
			t.Fatalf("first line %q (%v), want the key never used", line, err)
		}
		_ = cmd.Process.Signal(sig)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil || errOut.Len() != 0 {
				t.Errorf("status --watch after %v: %v, stderr %q; want exit 0", sig, err, errOut.String())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("status --watch still ran 30s after %v", sig)
		}
	}
}

// TestWatchWordsCandidates: a change of who waits is one worded part,
// in the candidates' order.
func TestWatchWordsCandidates(t *testing.T) {
	host := "b"
	a := watchReport("web-1", 3, 9)
	a.listed, a.Candidates = candidatesListed, []candidateReport{}
	b := a
	b.Candidates = []candidateReport{{Place: 0, ID: "web-2", Hostname: &host}, {Place: 1, ID: "web-3"}}
	if got := describeChange(&a, b); got != "candidates: 2 waiting: web-2 (host b), web-3" {
		t.Errorf("describeChange: %q", got)
	}
	if got := describeChange(&b, a); got != "candidates: none" {
		t.Errorf("describeChange back: %q", got)
	}
}
