//go:build linux

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// notifyUntil reads notifications until one contains want and fails the
// test if any of them, that one included, tells systemd STOPPING=1.
func notifyUntil(t *testing.T, msgs <-chan string, want string, within time.Duration) {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case m := <-msgs:
			if strings.Contains(m, "STOPPING=1") {
				t.Fatalf("STOPPING=1 told to systemd before %q: %q", want, m)
			}
			if strings.Contains(m, want) {
				return
			}
		case <-timeout:
			t.Fatalf("no notification with %q within %v", want, within)
		}
	}
}

// TestHandoverIsNoStopForSystemd: a pause or a step-down stops the job
// and releases the key, but leaderrun goes on waiting. systemd must not
// hear STOPPING=1 then: it would count the unit as deactivating and, once
// TimeoutStopSec passed, SIGKILL the candidate (and a job it leads again
// by then) and restart the unit.
func TestHandoverIsNoStopForSystemd(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key := opsKey("handover-notify")
	sock, msgs := notifyListener(t)
	a := start(t, "a", []string{"NOTIFY_SOCKET=" + sock}, withCommand(opsLocalArgs(dir, key, "--id", "a"), "exec sleep 1000")...)
	notifyUntil(t, msgs, "STATUS=leader of "+key, 20*time.Second)

	q := []string{key, "--backend", "local", "--lock-dir", dir}
	if code, _, errOut, _ := runOnce(t, nil, append([]string{"pause", "--reason", "test"}, q...)...); code != 0 {
		t.Fatalf("pause: exit %d\n%s", code, errOut)
	}
	notifyUntil(t, msgs, "STATUS=not campaigning for "+key, 20*time.Second)
	if code, _, errOut, _ := runOnce(t, nil, append([]string{"resume"}, q...)...); code != 0 {
		t.Fatalf("resume: exit %d\n%s", code, errOut)
	}
	notifyUntil(t, msgs, "STATUS=leader of "+key, 20*time.Second)

	// step-down to a second candidate: a waits again.
	b := start(t, "b", nil, withCommand(opsLocalArgs(dir, key, "--id", "b"), "exec sleep 1000")...)
	if code, out, errOut, _ := runOnce(t, nil, append([]string{"step-down"}, q...)...); code != 0 || !strings.Contains(out, "b leads") {
		t.Fatalf("step-down: exit %d\n%s%s", code, out, errOut)
	}
	notifyUntil(t, msgs, "STATUS=campaigning for "+key, 20*time.Second)

	// A real stop is one.
	a.Signal(syscall.SIGTERM)
	expectNotify(t, msgs, "STOPPING=1", 10*time.Second)
	a.Wait(20 * time.Second)
	b.Signal(syscall.SIGTERM)
	b.Wait(20 * time.Second)
}

// TestNoGuardRetryIsNoStopForSystemd: a term given back for want of a
// dead-man guard is followed by another campaign, not by leaderrun's end:
// systemd must not hear STOPPING=1 then either.
func TestNoGuardRetryIsNoStopForSystemd(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := withBrokenGuard(t, dir)
	sock, msgs := notifyListener(t)
	cmd := exec.Command(filepath.Join(bin, "leaderrun"), withCommand(localArgs(dir, "k"), "exec sleep 1000")...)
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+sock)
	p := launch(t, "no-guard", cmd)
	// "stopping (…)" while the term ends, "stopped (…); released" once it
	// has: systemd hears the state of the moment, and with GOMAXPROCS 1
	// the supervisor may release before the notifier runs.
	notifyUntil(t, msgs, "STATUS=stopp", 20*time.Second)
	notifyUntil(t, msgs, "STATUS=campaigning for", 20*time.Second)
	p.Signal(syscall.SIGTERM)
	p.Wait(20 * time.Second)
}
