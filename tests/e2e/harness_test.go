// Package e2e runs the real leaderrun binary against real backends and real
// child processes, and asserts what an operator would observe: which child
// ran, with which epoch, when it died, and leaderrun's exit code.
package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/signals"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// binary is the leaderrun built once for this test process, and
// guardBinary the leaderrun-guard installed next to it.
var binary, guardBinary string

func TestMain(m *testing.M) {
	// Under nohup the test binary starts with SIGHUP ignored, and every
	// leaderrun it starts would inherit that (leaderrun keeps signals that
	// were ignored at start ignored, DESIGN §1.11), so the tests of
	// forwarding would fail. A handler here is reset to the default in
	// each process the tests start.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP)
	dir, err := os.MkdirTemp("", "leaderrun-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "leaderrun")
	guardBinary = filepath.Join(dir, "leaderrun-guard")
	// The test hooks (LEADERRUN_TEST_FREEZE_FILE) exist only in this build.
	for out, pkg := range map[string]string{binary: "github.com/leaderrun/leaderrun", guardBinary: "github.com/leaderrun/leaderrun/cmd/leaderrun-guard"} {
		build := exec.Command("go", "build", "-tags", "leaderrun_testhooks", "-o", out, pkg)
		if os.Getenv("LEADERRUN_TEST_RACE") == "1" {
			build.Args = append(build.Args[:2], append([]string{"-race"}, build.Args[2:]...)...)
		}
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build leaderrun:", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	if left := leftoverGuards(); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: dead-man guards outlived their tests: pids %v\n", left)
		code = 1
	}
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// leftoverGuards lists guard processes of this test binary's leaderrun that
// are still alive, once every test has finished.
func leftoverGuards() []int {
	var left []int
	deadline := time.Now().Add(3 * time.Second)
	for {
		left = left[:0]
		for _, pid := range testsupport.Pids() {
			dir := "/proc/" + strconv.Itoa(pid)
			exe, _ := os.Readlink(dir + "/exe")
			cmd, _ := os.ReadFile(dir + "/cmdline")
			exe = strings.TrimSuffix(exe, " (deleted)")
			if (exe == guardBinary || exe == binary && strings.Contains(string(cmd), "__guard")) && alive(pid) {
				left = append(left, pid)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Proc is one running leaderrun.
type Proc struct {
	t      testing.TB
	name   string
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan struct{}
	code   int
}

// start runs leaderrun with args and extra environment. It is killed at the
// end of the test if still running.
func start(t testing.TB, name string, env []string, args ...string) *Proc {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	return launch(t, name, cmd)
}

// launch starts cmd (a leaderrun, or a wrapper that execs one) in its own
// process group, so a test's signals reach only it, with its output
// collected; it is killed at the end of the test if still running, and its
// output shown if the test failed.
func launch(t testing.TB, name string, cmd *exec.Cmd) *Proc {
	t.Helper()
	p := &Proc{t: t, name: name, cmd: cmd, stderr: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Stdout = p.stderr
	p.cmd.Stderr = p.stderr
	if p.cmd.SysProcAttr == nil {
		p.cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	p.cmd.SysProcAttr.Setpgid = true
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start leaderrun %s: %v", name, err)
	}
	go func() {
		p.code = exitStatus(p.cmd.Wait())
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.Exited() {
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
		}
		if t.Failed() {
			t.Logf("--- leaderrun %s output:\n%s", name, p.stderr.String())
		}
	})
	return p
}

// exitStatus is the status as a shell reports it.
var exitStatus = testsupport.ExitStatus

// Wait waits for leaderrun to exit and returns its exit code.
func (p *Proc) Wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(timeout):
		p.t.Fatalf("leaderrun %s still running after %v\n%s", p.name, timeout, p.stderr.String())
		return -1
	}
}

// Exited reports whether leaderrun has exited.
func (p *Proc) Exited() bool { return testsupport.IsClosed(p.done) }

// Signal sends sig to leaderrun itself.
func (p *Proc) Signal(sig syscall.Signal) {
	_ = p.cmd.Process.Signal(sig)
}

// Pid is leaderrun's process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Output is what leaderrun and its child printed so far.
func (p *Proc) Output() string { return p.stderr.String() }

// waitFor polls cond until it holds or the timeout passes.
var waitFor = testsupport.WaitFor

// alive reports whether pid is a live process (zombies count as dead).
func alive(pid int) bool { return signals.ProcessAlive(pid) }

// readPID reads a pid a child wrote to path, once it exists.
func readPID(t testing.TB, path string) int {
	t.Helper()
	var pid int
	waitFor(t, 10*time.Second, "pid file "+filepath.Base(path), func() bool {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	return pid
}

// syncBuffer is a buffer safe for the writer and a reading test.
type syncBuffer = testsupport.SyncBuffer
