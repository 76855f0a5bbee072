//go:build linux

package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
)

func TestControlContract(t *testing.T) {
	dir := t.TempDir()
	lockertest.ControlContract(t, func(t *testing.T, key string) locker.Locker {
		l := newLockerKey(t, dir, key)
		t.Cleanup(func() { l.Close() })
		return l
	})
}

// TestControlApart: the control file sits beside the key's lock file, at
// a name no key's files have, 0600 like the lock file, and changes nothing
// Leader, the history and the run records answer; a holder's priority
// survives the lock file's record.
func TestControlApart(t *testing.T) {
	dir := t.TempDir()
	lockertest.ControlApart(t, func(t *testing.T, name string) locker.Locker {
		key, slot := lockertest.KeySlot(name)
		l, err := New(Config{Options: locker.Options{Key: key, Slot: slot, Prefix: "leaderrun", ID: "me", TTL: 15 * time.Second, Priority: 7}, Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}, 7)
	base := filepath.Join(dir, "leaderrun", lockertest.Key(t))
	for _, p := range []string{base + "~control", base + "~control.lock"} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v, %v; want a file of mode 0600", p, fi, err)
		}
	}
	if _, err := os.Stat(base + "~1~control"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a slot key wrote a control file of its own: %v", err)
	}
}

// TestControlWritesAcrossProcesses: writers in three processes, each
// reading the record and writing the next count conditioned on the
// version it read (again after a conflict), lose no write: the flock of
// the control lock file makes the check and the write one step.
func TestControlWritesAcrossProcesses(t *testing.T) {
	if os.Getenv("LEADERRUN_CONTROL_WRITER") != "" {
		t.Skip("run by the writers")
	}
	dir := t.TempDir()
	const procs, each = 3, 30
	cmds := make([]*exec.Cmd, procs)
	outs := make([]bytes.Buffer, procs)
	for i := range cmds {
		cmds[i] = exec.Command(os.Args[0], "-test.run=^TestControlWriter$", "-test.count=1")
		cmds[i].Env = append(os.Environ(), "LEADERRUN_CONTROL_WRITER="+dir, "LEADERRUN_CONTROL_WRITES="+strconv.Itoa(each))
		cmds[i].Stdout, cmds[i].Stderr = &outs[i], &outs[i]
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("a writer failed: %v\n%s", err, outs[i].Bytes())
		}
	}
	c, err := newLockerKey(t, dir, "shared").Control(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if c.Version != strconv.Itoa(procs*each) || c.StepDown == nil || c.StepDown.Epoch != procs*each {
		t.Fatalf("after %d writes: version %q, record %s; want every write counted", procs*each, c.Version, c.Record())
	}
}

// TestControlWriter is one writer of TestControlWritesAcrossProcesses.
func TestControlWriter(t *testing.T) {
	dir := os.Getenv("LEADERRUN_CONTROL_WRITER")
	if dir == "" {
		t.Skip("only as a writer")
	}
	n, _ := strconv.Atoi(os.Getenv("LEADERRUN_CONTROL_WRITES"))
	l := newLockerKey(t, dir, "shared")
	ctx := lockertest.Ctx(t, 30*time.Second)
	for done := 0; done < n; {
		c, err := l.Control(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if c.StepDown == nil {
			c.StepDown = &locker.StepDown{Key: "shared"}
		}
		c.StepDown.Epoch++
		c.StepDown.By = fmt.Sprint(os.Getpid())
		switch _, err := l.SetControl(ctx, c); {
		case err == nil:
			done++
		case !errors.Is(err, locker.ErrConflict):
			t.Fatal(err)
		}
	}
}

// TestWaitControlSeesAWriteWithinTwoStats: a WaitControl with no change
// waits; a write (through a slot key) reaches it within two stats.
func TestWaitControlSeesAWriteWithinTwoStats(t *testing.T) {
	dir := t.TempDir()
	w, writer := newLockerKey(t, dir, "job"), newLockerKey(t, dir, "job~3")
	v, err := writer.SetControl(context.Background(), locker.Control{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	var got locker.Control
	go func() {
		var err error
		got, err = w.WaitControl(context.Background(), v)
		done <- err
	}()
	time.Sleep(3 * controlPoll)
	select {
	case err := <-done:
		t.Fatalf("WaitControl returned with no change: %v", err)
	default:
	}
	wrote := time.Now()
	v2, err := writer.SetControl(context.Background(), locker.Control{Version: v, Pause: &locker.Pause{By: "ops@h", Reason: "r"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil || got.Version != v2 || !got.Paused() {
		t.Fatalf("WaitControl = %+v, %v; want the pause at %q", got, err, v2)
	}
	if d := time.Since(wrote); d > 2*controlPoll+100*time.Millisecond {
		t.Fatalf("the write reached the waiter after %v, want within two stats (%v)", d, 2*controlPoll)
	} else {
		t.Logf("the write reached the waiter after %v", d.Round(time.Millisecond))
	}
}

// inotifyFDs counts this process's inotify instances.
func inotifyFDs(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && target == "anon_inode:inotify" {
			n++
		}
	}
	return n
}

// TestWaitControlWatchesOnceTheDirectoryExists: a WaitControl begun before
// the key's directory exists (a leader's first start on a fresh lock
// directory) sleeps on inotify once it appears, rather than stat the
// file every controlPoll for as long as the record does not change; and
// a write still reaches it.
func TestWaitControlWatchesOnceTheDirectoryExists(t *testing.T) {
	dir := t.TempDir()
	w := newLockerKey(t, dir, "job")
	if _, err := os.Stat(filepath.Dir(w.controlPath())); !os.IsNotExist(err) {
		t.Fatalf("the key's directory exists before any use: %v", err)
	}
	before := inotifyFDs(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	var got locker.Control
	go func() {
		var err error
		got, err = w.WaitControl(ctx, "")
		done <- err
	}()
	// The waiter reads no record and finds no directory to watch; then
	// the directory appears, as a campaign makes it.
	time.Sleep(3 * controlPoll)
	if err := os.MkdirAll(filepath.Dir(w.controlPath()), 0o700); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); inotifyFDs(t) <= before; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("WaitControl never watched the key's directory once it existed: it stats the control file every " + controlPoll.String())
		}
	}
	writer := newLockerKey(t, dir, "job~2")
	v, err := writer.SetControl(context.Background(), locker.Control{Pause: &locker.Pause{By: "ops@h", Reason: "r"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil || got.Version != v || !got.Paused() {
		t.Fatalf("WaitControl = %+v, %v; want the pause at %q", got, err, v)
	}
}

// TestIdleWaitControlLooksRarely: a WaitControl on a record nobody writes
// sleeps on inotify past the lock wait's 5s recheck: it looks at the file
// when it begins and not again within 6s (an idle leader so wakes for its
// renewals, not for its control record), and a write still reaches it.
func TestIdleWaitControlLooksRarely(t *testing.T) {
	dir := t.TempDir()
	w, writer := newLockerKey(t, dir, "job"), newLockerKey(t, dir, "job~2")
	v, err := writer.SetControl(context.Background(), locker.Control{})
	if err != nil {
		t.Fatal(err)
	}
	var stats atomic.Int64
	stat := statControl
	statControl = func(path string) fileState { stats.Add(1); return stat(path) }
	t.Cleanup(func() { statControl = stat })
	done := make(chan error, 1)
	var got locker.Control
	go func() {
		var err error
		got, err = w.WaitControl(context.Background(), v)
		done <- err
	}()
	time.Sleep(recheckInterval + time.Second)
	if n := stats.Load(); n > 2 {
		t.Fatalf("an idle WaitControl looked at the control file %d times in %v, want twice (as it began)", n, recheckInterval+time.Second)
	}
	v2, err := writer.SetControl(context.Background(), locker.Control{Version: v, Pause: &locker.Pause{By: "ops@h", Reason: "r"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil || got.Version != v2 || !got.Paused() {
		t.Fatalf("WaitControl = %+v, %v; want the pause at %q", got, err, v2)
	}
}
