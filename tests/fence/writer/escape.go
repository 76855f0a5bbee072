package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"github.com/leaderrun/leaderrun/tests/fence"
)

// A writer started with FENCE_ESCAPE=1 is a job that escapes its process
// group, as a legacy daemon does: it starts a middle process in a new
// session (setsid), the middle process starts the real writer and exits at
// once, so the writer is an orphan of another session and process group
// whose parent went away. The process leaderrun started stays behind as
// the job's main process and exits when the writer is gone; it never writes
// itself. Only leaderrun's containment (the job's cgroup, or its group
// sweep) can stop the escaped writer.
//
// The escaped writer reports the launcher's start as its own (FENCE_STARTED),
// so "the old child was dead when the new one started" is judged from the
// moment leaderrun started the job.

// Arguments that select the escape stages.
const (
	argMiddle = "escape-middle"
	argDaemon = "escape-daemon"
)

// escapeStage runs the stage os.Args asks for; ok is false for a plain
// writer.
func escapeStage(started fence.Mono) (ok bool, err error) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case argMiddle:
			return true, middle()
		case argDaemon:
			if s := os.Getenv("FENCE_STARTED"); s != "" {
				n, err := strconv.ParseInt(s, 10, 64)
				if err != nil {
					return true, fmt.Errorf("FENCE_STARTED %q: %w", s, err)
				}
				started = fence.Mono(n)
			}
			// The pipe to the launcher is inherited as fd 3 and stays open
			// until this process dies.
			return true, run(started)
		}
	}
	if os.Getenv("FENCE_ESCAPE") == "1" {
		return true, launch(started)
	}
	return false, nil
}

// launch starts the middle process in a new session and waits until the
// escaped writer, which holds the write end of a pipe, is gone.
func launch(started fence.Mono) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, argMiddle)
	cmd.Env = append(os.Environ(), "FENCE_STARTED="+strconv.FormatInt(int64(started), 10))
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	w.Close()
	if err != nil {
		return err
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("escape: middle process: %w", err)
	}
	_, _ = io.Copy(io.Discard, r) // until the escaped writer's end closes
	return fmt.Errorf("escape: the escaped writer is gone")
}

// middle starts the escaped writer in a process group of its own, with no
// terminal and the standard streams on /dev/null, and exits without waiting
// for it.
func middle() error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, argDaemon)
	cmd.ExtraFiles = []*os.File{os.NewFile(3, "escape-pipe")}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd.Start()
}
