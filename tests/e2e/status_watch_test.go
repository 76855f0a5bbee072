//go:build linux

package e2e

import (
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// watchLine is one line of status --watch: an RFC 3339 time, then text.
var watchLine = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ (.*)$`)

// watchTexts are the texts of the lines status --watch printed so far;
// any other line is an error of the test.
func watchTexts(t *testing.T, p *Proc) []string {
	t.Helper()
	var texts []string
	for _, line := range strings.Split(strings.TrimSuffix(p.Output(), "\n"), "\n") {
		if line == "" {
			continue
		}
		m := watchLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("status --watch printed %q, not a time then a change", line)
		}
		texts = append(texts, m[1])
	}
	return texts
}

// waitWatch waits for a line of status --watch that matches re, after
// the line numbered from, and returns its number.
func waitWatch(t *testing.T, p *Proc, from int, re string) int {
	t.Helper()
	r := regexp.MustCompile(re)
	at := -1
	waitFor(t, 60*time.Second, "status --watch to print "+re, func() bool {
		for i, s := range watchTexts(t, p) {
			if i > from && r.MatchString(s) {
				at = i
				return true
			}
		}
		return false
	})
	return at
}

// statusWatch: status --watch of a key prints its state, then one line
// per change, in order: a leader, no leader once it stopped, the next
// leader with the one before, a pause; never the same state twice in a
// row (the lease left changes at every read and is no change). With
// outage set, the backend stopped and started again in between is one
// line saying it cannot be read, then the state. SIGINT ends it, exit 0.
func statusWatch(t *testing.T, args func(key string) []string, outage func(stop bool)) {
	key, mark, env := markedKey("watch")
	q := queryArgs(args(key))
	w := start(t, "status --watch", nil, append([]string{"status", "--watch", "--interval", "200ms", "--timeout", "2s"}, q...)...)
	at := waitWatch(t, w, -1, `.`)
	run := func(id string) *Proc {
		return start(t, id, env, withCommand(append(args(key), "--id", id), "exec sleep 1000")...)
	}

	a := run("a")
	waitFor(t, 30*time.Second, "a leading", func() bool { id, _ := leaderChild(mark); return id == "a" })
	_, e1 := leaderChild(mark)
	at = waitWatch(t, w, at, `^leader a \(host [^,]+, pid \d+\) epoch `+itoa(e1)+`( |$)`)
	stopAll(a)
	at = waitWatch(t, w, at, `^no leader \(was a epoch `+itoa(e1)+`\)`)

	b := run("b")
	defer stopAll(b)
	waitFor(t, 30*time.Second, "b leading", func() bool { id, _ := leaderChild(mark); return id == "b" })
	_, e2 := leaderChild(mark)
	if e2 <= e1 {
		t.Errorf("b leads with epoch %d, a had %d", e2, e1)
	}
	at = waitWatch(t, w, at, `^leader b \(host [^,]+, pid \d+\) epoch `+itoa(e2)+` \(was no leader\)`)

	if code, _, errOut, _ := runOnce(t, nil, append([]string{"pause", "--reason", "watch audit", "--timeout", "20s"}, q...)...); code != 0 {
		t.Fatalf("pause: exit %d %s", code, errOut)
	}
	// The pause and the end of b's term: one line or two.
	at = max(waitWatch(t, w, at, `paused: watch audit \(by `), waitWatch(t, w, at, `^no leader \(was b epoch `+itoa(e2)+`\)`))

	if outage != nil {
		outage(true)
		at = waitWatch(t, w, at, `^cannot read the backend, still watching: `)
		// Several reads fail while it is down: one line says so.
		time.Sleep(2 * time.Second)
		outage(false)
		at = waitWatch(t, w, at, `^backend readable again: no leader; paused: watch audit`)
	}

	// Nothing changes for a while: no line.
	time.Sleep(2 * time.Second)
	texts := watchTexts(t, w)
	if len(texts) != at+1 {
		t.Errorf("status --watch printed lines while nothing changed: %q", texts[at+1:])
	}
	for i := 1; i < len(texts); i++ {
		if texts[i] == texts[i-1] {
			t.Errorf("status --watch printed %q twice in a row", texts[i])
		}
	}
	w.Signal(syscall.SIGINT)
	if code := w.Wait(20 * time.Second); code != 0 {
		t.Errorf("status --watch after SIGINT: exit %d, want 0", code)
	}
	if t.Failed() {
		t.Logf("status --watch printed:\n%s", w.Output())
	}
}

func itoa(n uint64) string { return strconvItoa(int64(n)) }

func TestStatusWatchLocal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	statusWatch(t, func(key string) []string { return localArgs(dir, key) }, nil)
}

func TestStatusWatchEtcd(t *testing.T) {
	t.Parallel()
	c := testcluster.StartEtcd(t, 1)
	eps := c.Endpoints()
	statusWatch(t, func(key string) []string { return etcdArgs(eps, key) }, func(stop bool) {
		if stop {
			c.Stop(0)
		} else {
			c.Restart(0)
		}
	})
}

// TestStatusWatchHoldersLocal: status --watch of a key run with --holders
// 2 follows its slots: once the holder of slot 0 stopped, a line says
// slot 0 is free and who keeps slot 1.
func TestStatusWatchHoldersLocal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key, mark, env := markedKey("watch-slots")
	w := start(t, "status --watch", nil, "status", "--watch", "--interval", "200ms", "--backend", "local", "--lock-dir", dir, key)
	at := waitWatch(t, w, -1, `.`)
	holdersPair(t, dir, key, mark, env)
	waitWatch(t, w, at, `^no leader in slot 0 \(was h[01] epoch \d+\); holders 2: slot 0 free, slot 1 h[01] epoch \d+$`)
	w.Signal(syscall.SIGINT)
	if code := w.Wait(20 * time.Second); code != 0 {
		t.Errorf("status --watch after SIGINT: exit %d, want 0", code)
	}
}
