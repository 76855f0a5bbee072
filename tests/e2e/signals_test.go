package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/contain"
)

// A signal sent to a standby while it waits is not kept for the child it
// starts after a takeover (DESIGN §1.11).
func TestSignalToStandbyIsNotDeliveredAfterTakeover(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a := start(t, "A", nil, withCommand(localArgs(dir, "k"), "echo $$ > "+dir+"/a.pid; exec sleep 1000")...)
	readPID(t, dir+"/a.pid")
	b := start(t, "B", nil, withCommand(localArgs(dir, "k"), "echo $$ > "+dir+"/b.pid; exec sleep 1000")...)
	waitFor(t, 5*time.Second, "B to campaign", func() bool { return strings.Contains(b.Output(), "waiting for the holder") })
	b.Signal(syscall.SIGHUP)
	time.Sleep(200 * time.Millisecond)
	a.Signal(syscall.SIGTERM)
	child := readPID(t, dir+"/b.pid")
	time.Sleep(500 * time.Millisecond)
	if !contain.ProcessAlive(child) {
		t.Fatalf("B's child died after the takeover: the SIGHUP sent while waiting reached it\n%s", b.Output())
	}
	b.Signal(syscall.SIGTERM)
	b.Wait(10 * time.Second)
}

// nohup: a signal ignored when leaderrun started stays ignored, for
// leaderrun and for the child (DESIGN §1.11).
func TestIgnoredSignalStaysIgnored(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	args := withCommand(localArgs(dir, "k"), "echo $$ > "+dir+"/c.pid; exec sleep 1000")
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	cmd := exec.Command("sh", "-c", "trap '' HUP; exec "+binary+" "+strings.Join(quoted, " "))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); <-exited })
	child := readPID(t, filepath.Join(dir, "c.pid"))
	_ = cmd.Process.Signal(syscall.SIGHUP)
	time.Sleep(500 * time.Millisecond)
	if !contain.ProcessAlive(child) {
		t.Fatalf("the child died of a SIGHUP that was ignored when leaderrun started\n%s", out.String())
	}
	if !ignores(t, child, syscall.SIGHUP) {
		t.Fatal("the child does not inherit SIGHUP ignored")
	}
}

// ignores reads SigIgn from /proc/PID/status.
func ignores(t *testing.T, pid int, sig syscall.Signal) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return mask&(1<<(uint(sig)-1)) != 0
		}
	}
	t.Fatal("no SigIgn")
	return false
}
