//go:build linux

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// TestPausedHolderSaysItWaitsForResume: a holder stopped by pause says
// that it is paused and campaigns no more until resumed, not that it
// stepped down; one stopped by step-down still says that.
func TestPausedHolderSaysItWaitsForResume(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key, mark, env := markedKey("paused-words")
	p := start(t, "holder", env, withCommand(append(localArgs(dir, key), "--id", "h"), "exec sleep 1000")...)
	defer stopAll(p)
	waitFor(t, 30*time.Second, "the holder's child", func() bool { id, _ := leaderChild(mark); return id != "" })
	q := queryArgs(localArgs(dir, key))
	mustControl(t, q, "pause", "--reason", "maintenance")
	waitFor(t, 30*time.Second, "the paused line", func() bool { return strings.Contains(p.Output(), "not campaigning until resumed") })
	if strings.Contains(p.Output(), "stepping down") {
		t.Errorf("a paused holder says it stepped down:\n%s", p.Output())
	}
	mustControl(t, q, "resume")
	waitFor(t, 30*time.Second, "the holder's child again", func() bool { id, _ := leaderChild(mark); return id != "" })
	// The only candidate: it leads again, and step-down says so (exit 5).
	control(t, q, "step-down", "--timeout", "5s")
	waitFor(t, 30*time.Second, "the step-down line", func() bool { return strings.Contains(p.Output(), "waiting again after stepping down") })
}

// TestCheckOfAnotherSlotSaysSo: check --epoch N of a key run with
// --holders 2, where epoch N holds slot 1 and slot 0 has another epoch,
// is "not leader" of slot 0 (exit 1) and says that N holds slot 1, and to
// give --slot 1.
func TestCheckOfAnotherSlotSaysSo(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key, mark, env := markedKey("check-slot")
	procs := map[string]*Proc{}
	run := func(id string) {
		procs[id] = start(t, id, env, withCommand(append(localArgs(dir, key), "--holders", "2", "--id", id), "exec sleep 1000")...)
	}
	defer func() {
		for _, p := range procs {
			stopAll(p)
		}
	}()
	run("h0")
	run("h1")
	waitFor(t, 30*time.Second, "2 slots filled", func() bool { return len(slotChildren(mark)) == 2 })
	// Slot 0 changes hands until its epoch differs from slot 1's (each
	// slot counts its own epochs; a slot won twice in a race counts both).
	epochs := map[int]string{}
	read := func() bool {
		kids := slotChildren(mark)
		clear(epochs)
		for _, k := range kids {
			epochs[k.slot] = testsupport.Environ(k.pid)["LEADER_EPOCH"]
		}
		return len(kids) == 2 && epochs[0] != "" && epochs[1] != ""
	}
	waitFor(t, 30*time.Second, "both slots' epochs", read)
	for i := 2; epochs[0] == epochs[1]; i++ {
		if i > 6 {
			t.Fatalf("slot 0 and slot 1 keep the same epoch: %v", epochs)
		}
		for _, k := range slotChildren(mark) {
			if k.slot == 0 {
				stopAll(procs[k.id])
				delete(procs, k.id)
			}
		}
		run(fmt.Sprintf("h%d", i))
		waitFor(t, 30*time.Second, "slot 0 taken again", read)
	}
	epoch := epochs[1]
	q := queryArgs(localArgs(dir, key))
	code, _, errOut, _ := runOnce(t, nil, append([]string{"check", "--epoch", epoch}, q...)...)
	if code != 1 {
		t.Fatalf("check --epoch %s (slot 1's): exit %d, want 1\n%s", epoch, code, errOut)
	}
	for _, want := range []string{"slot 1", "--slot 1"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("check --epoch %s of slot 1 does not say %q:\n%s", epoch, want, errOut)
		}
	}
	if code, _, errOut, _ := runOnce(t, nil, append([]string{"check", "--epoch", epoch, "--slot", "1"}, q...)...); code != 0 {
		t.Errorf("check --epoch %s --slot 1: exit %d\n%s", epoch, code, errOut)
	}
}
