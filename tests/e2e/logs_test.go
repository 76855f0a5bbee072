package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// What the logs say (issue: the operator's second hour): what was killed,
// whom a standby waits for, a failed child, one JSON record per line with
// durations in seconds, timestamps on the guard's lines, few lines for a
// trivial run.

// records parses out as one JSON object per line, and fails the test on any
// line that is not one.
func records(t *testing.T, out string) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("not one JSON record per line: %q: %v\n%s", line, err, out)
		}
		if _, ok := r["@timestamp"].(string); !ok {
			t.Fatalf("record without @timestamp: %q", line)
		}
		recs = append(recs, r)
	}
	return recs
}

// find is the first record with this message and module.
func find(recs []map[string]any, module, msg string) map[string]any {
	for _, r := range recs {
		if r["@module"] == module && r["@message"] == msg {
			return r
		}
	}
	return nil
}

func TestJSONLogsSecondsAndExitCode(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := start(t, "json", nil, withCommand(localArgs(dir, "k", "--log-format", "json", "--log-level", "debug"), "exit 2")...)
	if code := p.Wait(10 * time.Second); code != 2 {
		t.Fatalf("exit %d, want the child's 2\n%s", code, p.Output())
	}
	recs := records(t, p.Output())
	acq := find(recs, "leaderrun", "acquired")
	if acq == nil {
		t.Fatalf("no acquired record:\n%s", p.Output())
	}
	if left, ok := acq["lease_left_s"].(float64); !ok || left <= 0 || left > 4 {
		t.Fatalf("acquired: lease_left_s=%v, want seconds of the 4s TTL left: %v", acq["lease_left_s"], acq)
	}
	for _, r := range recs {
		for k, v := range r {
			if f, ok := v.(float64); ok && f >= 1e6 && !strings.HasPrefix(k, "@") && k != "pid" && k != "leaderrun_pid" {
				t.Errorf("field %s=%v looks like nanoseconds: %v", k, v, r)
			}
		}
	}
	exit := find(recs, "leaderrun", "child exited")
	if exit == nil || exit["exit_code"] != float64(2) || exit["@level"] != "warn" {
		t.Fatalf("child exit record: %v; want exit_code 2 (a number) at warn", exit)
	}
}

func TestFailedChildIsAWarning(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range []struct {
		script string
		code   int
	}{{"exit 3", 3}, {"kill -9 $$", 137}, {"exit 0", 0}} {
		p := start(t, c.script, nil, withCommand(localArgs(dir, "k"), c.script)...)
		if code := p.Wait(10 * time.Second); code != c.code {
			t.Fatalf("%s: exit %d, want %d\n%s", c.script, code, c.code, p.Output())
		}
		level := "[WARN] "
		if c.code == 0 {
			level = "[INFO] "
		}
		want := level + " leaderrun: child exited: pid="
		if !strings.Contains(p.Output(), want) || !strings.Contains(p.Output(), "exit_code="+strconv.Itoa(c.code)+" ") {
			t.Errorf("%s: want %q with exit_code=%d:\n%s", c.script, want, c.code, p.Output())
		}
	}
}

// TestTrivialRunIsThreeInfoLines: acquire, a child that exits 0, release.
func TestTrivialRunIsThreeInfoLines(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := start(t, "trivial", nil, append(localArgs(dir, "k"), "--", "true")...)
	if code := p.Wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d\n%s", code, p.Output())
	}
	out := strings.TrimSpace(p.Output())
	if n := strings.Count(out, "\n") + 1; n > 3 || strings.Count(out, "[INFO]") != n {
		t.Fatalf("a trivial run printed %d lines, want at most 3 INFO lines:\n%s", n, out)
	}
}

func TestStandbyNamesTheHolderItWaitsFor(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	host, _ := os.Hostname()
	a := start(t, "A", nil, withCommand(localArgs(dir, "k", "--id", "holder-a"), "echo $$ > "+dir+"/a.pid; exec sleep 1000")...)
	readPID(t, dir+"/a.pid")
	b := start(t, "B", nil, withCommand(localArgs(dir, "k", "--id", "holder-b"), "echo $$ > "+dir+"/b.pid; exec sleep 1000")...)
	waitFor(t, 10*time.Second, "B to name A", func() bool {
		return strings.Contains(b.Output(), "waiting for the holder: holder=holder-a host="+host+" pid="+strconv.Itoa(a.Pid())+" epoch=1")
	})
	c := start(t, "C", nil, withCommand(localArgs(dir, "k", "--id", "holder-c"), "echo $$ > "+dir+"/c.pid; exec sleep 1000")...)
	waitFor(t, 10*time.Second, "C to name A", func() bool { return strings.Contains(c.Output(), "holder=holder-a") })
	a.Signal(syscall.SIGTERM)
	a.Wait(10 * time.Second)
	// B or C leads now; the other names the new holder at its next read
	// of the holder (once a minute), once.
	var next, waiting *Proc
	waitFor(t, 10*time.Second, "a new leader", func() bool {
		for _, f := range []string{"b", "c"} {
			if _, err := os.Stat(dir + "/" + f + ".pid"); err == nil {
				next, waiting = b, c
				if f == "c" {
					next, waiting = c, b
				}
				return true
			}
		}
		return false
	})
	id := map[*Proc]string{b: "holder-b", c: "holder-c"}[next]
	waitFor(t, 75*time.Second, "the standby to name the new holder", func() bool {
		return strings.Contains(waiting.Output(), "waiting for the holder: holder="+id+" host="+host+" pid="+strconv.Itoa(next.Pid())+" epoch=2")
	})
	time.Sleep(time.Second)
	if n := strings.Count(waiting.Output(), "waiting for the holder"); n != 2 {
		t.Fatalf("the standby said \"waiting for the holder\" %d times, want 2 (at start, once the holder changed):\n%s", n, waiting.Output())
	}
}

// TestNohupedLeftoverIsNamedWhenKilled: the child exits 0 and leaves a
// nohup'ed sleep in its job; it is stopped with the job, and named.
func TestNohupedLeftoverIsNamedWhenKilled(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"group", "cgroup"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			p := start(t, "nohup", nil, withCommand(localArgs(dir, "k", "--contain", mode),
				// The child exits once the leftover is sleep, not the shell
				// that forked it or nohup, so its name is known.
				"nohup sleep 1000 >/dev/null 2>&1 & p=$!; while [ \"$(cat /proc/$p/comm 2>/dev/null)\" != sleep ]; do :; done; echo $p > "+dir+"/sleep.pid; exit 0")...)
			pid := readPID(t, dir+"/sleep.pid")
			t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
			if code := p.Wait(15 * time.Second); code != 0 {
				t.Fatalf("exit %d\n%s", code, p.Output())
			}
			if alive(pid) {
				t.Fatalf("the leftover sleep %d still runs", pid)
			}
			want := regexp.MustCompile(`\[WARN\]  leaderrun: stopping processes the child left running: .*processes="` + strconv.Itoa(pid) + ` \(sleep\)"`)
			if !want.MatchString(p.Output()) {
				t.Fatalf("want a WARN naming %d (sleep):\n%s", pid, p.Output())
			}
		})
	}
}

// TestGuardLinesAreTimestampedAndNameWhatTheyKill: leaderrun is SIGKILLed;
// its small guard kills the job, says which processes it killed, and its
// lines carry a timestamp, in text and in JSON as --log-format asks.
func TestGuardLinesAreTimestampedAndNameWhatTheyKill(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			// The grandchild outlives leaderrun (PDEATHSIG reaches only the
			// child): the guard kills it.
			p := start(t, "leader", nil, withCommand(localArgs(dir, "k", "--log-format", format),
				"sleep 1000 & echo $! > "+dir+"/gc.pid; exec sleep 1000")...)
			child := readPID(t, dir+"/gc.pid")
			g := guardOf(t, p)
			p.Signal(syscall.SIGKILL)
			waitFor(t, 5*time.Second, "the guard to exit", func() bool { return !alive(g) })
			if alive(child) {
				t.Fatalf("child %d outlived the guard", child)
			}
			out := p.Output()
			named := strconv.Itoa(child) + " (sleep)"
			if format == "json" {
				recs := records(t, out)
				r := find(recs, "leaderrun.guard", "killed the job")
				if r == nil || r["@level"] != "warn" || !strings.Contains(r["processes"].(string), named) {
					t.Fatalf("guard's kill record %v, want one at warn naming %s:\n%s", r, named, out)
				}
				if find(recs, "leaderrun.guard", "released leadership") == nil {
					t.Fatalf("no release record from the guard:\n%s", out)
				}
				return
			}
			stamp := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d{4}) \[(INFO|WARN|ERROR)\] ? leaderrun\.guard: `)
			var kill bool
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				if !strings.Contains(line, "leaderrun.guard:") {
					continue
				}
				if !stamp.MatchString(line) {
					t.Errorf("guard line without hclog's timestamp and level: %q", line)
				}
				kill = kill || strings.Contains(line, "killed the job") && strings.Contains(line, named)
			}
			if !kill {
				t.Fatalf("no guard line naming %s:\n%s", named, out)
			}
		})
	}
}

// TestMissingGuardWarnsOncePerBoot: a leaderrun with no leaderrun-guard
// beside it warns at the first quiet run, not at every one.
func TestMissingGuardWarnsOncePerBoot(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "leaderrun")
	b, err := os.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	env := []string{"XDG_RUNTIME_DIR=" + t.TempDir()}
	var outs []string
	for range 3 {
		cmd := exec.Command(bin, append(localArgs(dir, "k", "-q"), "--", "true")...)
		cmd.Env = append(os.Environ(), env...)
		p := launch(t, "no small guard", cmd)
		if code := p.Wait(10 * time.Second); code != 0 {
			t.Fatalf("exit %d\n%s", code, p.Output())
		}
		outs = append(outs, p.Output())
	}
	if !strings.Contains(outs[0], "[WARN]  leaderrun: leaderrun-guard is not installed next to leaderrun") {
		t.Fatalf("first quiet run: want the warning, got %q", outs[0])
	}
	if outs[1] != "" || outs[2] != "" {
		t.Fatalf("later quiet runs of the same binary: want nothing, got %q and %q", outs[1], outs[2])
	}
	// Without -q it is still said, at INFO.
	cmd := exec.Command(bin, append(localArgs(dir, "k"), "--", "true")...)
	cmd.Env = append(os.Environ(), env...)
	p := launch(t, "not quiet", cmd)
	p.Wait(10 * time.Second)
	if !strings.Contains(p.Output(), "[INFO]  leaderrun: leaderrun-guard is not installed") {
		t.Fatalf("a run that is not quiet: want the warning at INFO:\n%s", p.Output())
	}
}
