package e2e

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// --catch-up: a period that no host ran is run once by the first
// candidate that comes within the grace after its end, before that
// candidate's own period.

// catchUpPeriod is the --once-per period of these tests: long enough for a
// loaded machine to start two candidates well within it.
const catchUpPeriod = 10 * time.Second

// slotStartOf is the start of the catchUpPeriod slot containing tm, as
// leaderrun counts it (from the Unix epoch).
func slotStartOf(tm time.Time) time.Time {
	p := int64(catchUpPeriod / time.Second)
	return time.Unix(tm.Unix()-tm.Unix()%p, 0).UTC()
}

// waitIntoSlot sleeps until offset after the start of the next slot and
// returns that slot's start.
func waitIntoSlot(offset time.Duration) time.Time {
	next := slotStartOf(time.Now()).Add(catchUpPeriod)
	time.Sleep(time.Until(next.Add(offset)))
	return next
}

// catchUpScenarios runs the --catch-up cases on one backend; args builds a
// candidate's arguments for key, query those of `history` for key.
func catchUpScenarios(t *testing.T, args, query func(key string) []string) {
	period := strconv.Itoa(int(catchUpPeriod/time.Second)) + "s"
	// Each child appends "<LEADER_CATCH_UP or own> <LEADER_RUN_ID>".
	script := func(log string) string {
		return `echo "${LEADER_CATCH_UP:-own} $LEADER_RUN_ID" >> ` + log + "; sleep 1"
	}
	t.Run("a missed period is caught up once, then the current one runs", func(t *testing.T) {
		t.Parallel()
		log := filepath.Join(t.TempDir(), "runs")
		key := newKey("catchup")
		a := append(args(key), "--once-per", period, "--catch-up", period, "-q")
		// The period before: run as usual (nothing before it to catch
		// up: a fresh key's first run catches up the period before it,
		// so this one runs without --catch-up).
		first := waitIntoSlot(500 * time.Millisecond)
		p := start(t, "earlier period", nil, withCommand(append(args(key), "--once-per", period, "-q"), script(log))...)
		if code := p.Wait(60 * time.Second); code != 0 {
			t.Fatalf("earlier period: exit %d\n%s", code, p.Output())
		}
		// Nobody runs the next period; two hosts come back in the one
		// after, at the same time.
		missed := first.Add(catchUpPeriod)
		current := missed.Add(catchUpPeriod)
		time.Sleep(time.Until(current.Add(500 * time.Millisecond)))
		if !time.Now().Before(current.Add(catchUpPeriod / 2)) {
			t.Fatalf("the earlier period's run ended after %v (the machine is too slow for this test)", current)
		}
		ps := []*Proc{start(t, "host a", nil, withCommand(a, script(log))...), start(t, "host b", nil, withCommand(a, script(log))...)}
		for _, p := range ps {
			if code := p.Wait(90 * time.Second); code != 0 {
				t.Fatalf("%s: exit %d, want 0\n%s", p.name, code, p.Output())
			}
		}
		s := func(tm time.Time) string { return tm.Format(time.RFC3339) }
		want := []string{"own_" + s(first), s(missed) + "_" + s(missed), "own_" + s(current)}
		if got := runLines(log); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("children ran %v, want %v: the missed period caught up once, before the current one", got, want)
		}
		rows := readHistory(t, query(key))
		caught := map[string]bool{}
		for _, r := range rows {
			if r.Missed {
				t.Errorf("history still shows %s missed: %+v", r.Slot, rows)
			}
			if r.Slot != "" && r.SlotOutcome == "succeeded" {
				caught[r.Slot] = r.CaughtUp
			}
		}
		if len(caught) != 3 || !caught[s(missed)] || caught[s(first)] || caught[s(current)] {
			t.Fatalf("history %+v, want the three periods succeeded and only %s caught up", rows, s(missed))
		}
		h := start(t, "history text", nil, append([]string{"history"}, query(key)...)...)
		if code := h.Wait(20 * time.Second); code != 0 || !strings.Contains(h.Output(), s(missed)+" succeeded, caught up") {
			t.Fatalf("history: exit %d, want %s marked \"caught up\":\n%s", code, s(missed), h.Output())
		}
	})
	t.Run("a key's first run catches up nothing", func(t *testing.T) {
		t.Parallel()
		log := filepath.Join(t.TempDir(), "runs")
		key := newKey("catchupfresh")
		// No candidate ever campaigned for the key: no period before this
		// one was meant to run, so there is nothing to catch up.
		current := waitIntoSlot(500 * time.Millisecond)
		p := start(t, "first host", nil, withCommand(append(args(key), "--once-per", period, "--catch-up", period, "-q"), script(log))...)
		if code := p.Wait(60 * time.Second); code != 0 {
			t.Fatalf("exit %d\n%s", code, p.Output())
		}
		if got, want := runLines(log), "own_"+current.Format(time.RFC3339); len(got) != 1 || got[0] != want {
			t.Fatalf("children ran %v, want only %s: a key never used has no missed period", got, want)
		}
	})
	t.Run("the first hosts of a new key catch up nothing, one after the other", func(t *testing.T) {
		t.Parallel()
		log := filepath.Join(t.TempDir(), "runs")
		key := newKey("catchupfirsts")
		a := append(args(key), "--once-per", period, "--catch-up", period, "-q")
		// A new job on a fleet: the first host's run makes the key used,
		// and the next ones start moments later, within the same period.
		current := waitIntoSlot(500 * time.Millisecond)
		p := start(t, "first host", nil, withCommand(a, script(log))...)
		if code := p.Wait(60 * time.Second); code != 0 {
			t.Fatalf("first host: exit %d\n%s", code, p.Output())
		}
		if !time.Now().Before(current.Add(catchUpPeriod * 3 / 4)) {
			t.Fatalf("the first run ended after %v (the machine is too slow for this test)", current)
		}
		ps := []*Proc{start(t, "host b", nil, withCommand(a, script(log))...), start(t, "host c", nil, withCommand(a, script(log))...)}
		for _, p := range ps {
			if code := p.Wait(90 * time.Second); code != 0 {
				t.Fatalf("%s: exit %d, want 0\n%s", p.name, code, p.Output())
			}
		}
		if got, want := runLines(log), "own_"+current.Format(time.RFC3339); len(got) != 1 || got[0] != want {
			t.Fatalf("children ran %v, want only %s: the key was first used after the period before had ended", got, want)
		}
	})
	t.Run("a failed catch-up is the exit code", func(t *testing.T) {
		t.Parallel()
		log := filepath.Join(t.TempDir(), "runs")
		key := newKey("catchupfail")
		first := waitIntoSlot(500 * time.Millisecond)
		p := start(t, "earlier period", nil, withCommand(append(args(key), "--once-per", period, "-q"), script(log))...)
		if code := p.Wait(60 * time.Second); code != 0 {
			t.Fatalf("earlier period: exit %d\n%s", code, p.Output())
		}
		missed := first.Add(catchUpPeriod)
		current := missed.Add(catchUpPeriod)
		time.Sleep(time.Until(current.Add(500 * time.Millisecond)))
		// The catch-up fails with 3; the current period's run succeeds.
		failing := script(log) + `; [ -z "$LEADER_CATCH_UP" ] || exit 3`
		p = start(t, "host", nil, withCommand(append(args(key), "--once-per", period, "--catch-up", period, "-q"), failing)...)
		code := p.Wait(90 * time.Second)
		s := func(tm time.Time) string { return tm.Format(time.RFC3339) }
		want := []string{"own_" + s(first), s(missed) + "_" + s(missed), "own_" + s(current)}
		if got := runLines(log); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("children ran %v, want %v", got, want)
		}
		if code != 3 {
			t.Fatalf("exit %d, want the failed catch-up's 3 (the command ran here and failed)\n%s", code, p.Output())
		}
	})
	t.Run("a catch-up that keeps failing under --restart on-failure leaves the current period its run", func(t *testing.T) {
		t.Parallel()
		log := filepath.Join(t.TempDir(), "runs")
		key := newKey("catchuprestart")
		first := waitIntoSlot(500 * time.Millisecond)
		p := start(t, "earlier period", nil, withCommand(append(args(key), "--once-per", period, "-q"), script(log))...)
		if code := p.Wait(60 * time.Second); code != 0 {
			t.Fatalf("earlier period: exit %d\n%s", code, p.Output())
		}
		missed := first.Add(catchUpPeriod)
		current := missed.Add(catchUpPeriod)
		time.Sleep(time.Until(current.Add(500 * time.Millisecond)))
		// The missed period's job fails every time (its input is gone):
		// restarting it while leading would hold the key, and keep the
		// current period from running, for ever.
		failing := script(log) + `; [ -z "$LEADER_CATCH_UP" ] || exit 3`
		p = start(t, "host", nil, withCommand(append(args(key), "--once-per", period, "--catch-up", period,
			"--restart", "on-failure", "--restart-delay", "1s", "-q"), failing)...)
		code := p.Wait(90 * time.Second)
		s := func(tm time.Time) string { return tm.Format(time.RFC3339) }
		want := []string{"own_" + s(first), s(missed) + "_" + s(missed), "own_" + s(current)}
		if got := runLines(log); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("children ran %v, want %v: one catch-up attempt, then the current period", got, want)
		}
		if code != 3 {
			t.Fatalf("exit %d, want the failed catch-up's 3\n%s", code, p.Output())
		}
	})
	t.Run("past the grace, nothing is caught up", func(t *testing.T) {
		t.Parallel()
		log := filepath.Join(t.TempDir(), "runs")
		key := newKey("catchuplate")
		current := waitIntoSlot(3 * time.Second)
		p := start(t, "late host", nil, withCommand(append(args(key), "--once-per", period, "--catch-up", "2s", "-q"), script(log))...)
		if code := p.Wait(60 * time.Second); code != 0 {
			t.Fatalf("exit %d\n%s", code, p.Output())
		}
		if got, want := runLines(log), "own_"+current.Format(time.RFC3339); len(got) != 1 || got[0] != want {
			t.Fatalf("children ran %v, want only %s", got, want)
		}
	})
}

func TestCatchUpLocal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	catchUpScenarios(t, func(key string) []string { return localArgs(dir, key) },
		func(key string) []string { return []string{"--backend", "local", "--lock-dir", dir, key} })
}

func TestCatchUpEtcd(t *testing.T) {
	t.Parallel()
	eps := testcluster.StartEtcd(t, 1).Endpoints()
	catchUpScenarios(t, func(key string) []string { return etcdArgs(eps, key) },
		func(key string) []string {
			return []string{"--backend", "etcd", "--etcd-endpoints", strings.Join(eps, ","), key}
		})
}
