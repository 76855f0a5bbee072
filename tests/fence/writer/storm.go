package main

import (
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// A writer started with FENCE_STORM=N is a job that keeps forking, to race
// leaderrun's sweep of the job: beside the writing process, N chains of
// relays run. A relay lives a few milliseconds, starts its successor in a
// session and process group of its own and exits without waiting, so the
// chain's pid keeps moving, none of its processes is in the job's process
// group, and each one, once its parent is gone, is re-parented to the
// nearest subreaper (leaderrun) or to init. Only the job's cgroup, or the
// marker every relay inherits in its environment, still finds them all. A
// relay that outlives its job's sweep keeps the chain going: a leftover the
// chaos suite finds in /proc. Relays do not write to the fence.
//
// A chain also ends on its own, so that a failed run cannot leave it behind
// for long: at FENCE_STORM_UNTIL (Unix seconds, set by the first relay to
// an hour ahead), or when the writer's executable is gone (the suite's
// temporary folder was removed).

// argRelay selects the relay stage.
const argRelay = "storm-relay"

// relayLife bounds a relay's life before it hands over to its successor.
const relayLife = 25 * time.Millisecond

// stormStage runs a relay when os.Args asks for one; ok is false otherwise.
func stormStage() (ok bool, err error) {
	if len(os.Args) > 1 && os.Args[1] == argRelay {
		return true, relay()
	}
	return false, nil
}

// startStorm starts the chains FENCE_STORM asks for, if any.
func startStorm() error {
	n, _ := strconv.Atoi(os.Getenv("FENCE_STORM"))
	until := strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)
	for i := 0; i < n; i++ {
		if err := next(until); err != nil {
			return err
		}
	}
	return nil
}

// relay waits a moment, starts its successor and exits.
func relay() error {
	time.Sleep(time.Duration(rand.Int64N(int64(relayLife))) + time.Millisecond)
	until := os.Getenv("FENCE_STORM_UNTIL")
	if u, err := strconv.ParseInt(until, 10, 64); err != nil || time.Now().Unix() >= u {
		return nil // the chain ends
	}
	_ = next(until) // the executable may be gone: the chain ends
	return nil
}

// next starts one relay in a new session.
func next(until string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, argRelay)
	cmd.Env = append(os.Environ(), "FENCE_STORM_UNTIL="+until)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	// Not waited for: the relay is a child of ours only until we exit.
	return cmd.Process.Release()
}
