package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/signals"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// Run from an interactive shell, the job gets the terminal: its process
// group is the terminal's foreground group while it runs, so it reads what
// is typed, and leaderrun takes the terminal back before it exits, so the
// shell reads the next line (issue 26).

// onTerminal runs leaderrun with args from a shell that leads a session on
// a fresh pseudo-terminal, the way an interactive shell runs a command in
// the foreground: leaderrun is in the shell's process group, which is the
// terminal's foreground group. After leaderrun the shell prints its exit
// code and reads one more line from the terminal.
func onTerminal(t *testing.T, args ...string) (*testsupport.PTY, *Proc) {
	t.Helper()
	pty := testsupport.OpenPTY(t)
	script := `"$@"; echo "leaderrun-exit:$?"; read -r z; echo "shell-read:$z"`
	cmd := exec.Command("sh", append([]string{"-c", script, "sh", binary}, args...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = pty.Slave, pty.Slave, pty.Slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Proc{t: t, name: "on a terminal", cmd: cmd, stderr: &syncBuffer{}, done: make(chan struct{})}
	go func() {
		p.code = exitStatus(cmd.Wait())
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.Exited() {
			// The shell's group holds leaderrun; the child dies with it.
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
		if t.Failed() {
			t.Logf("--- the terminal showed:\n%s", pty.Screen())
		}
	})
	return pty, p
}

// leaderrunExit waits for the shell to report leaderrun's exit code.
func leaderrunExit(t *testing.T, pty *testsupport.PTY) int {
	t.Helper()
	re := regexp.MustCompile(`leaderrun-exit:(\d+)`)
	var m []string
	waitFor(t, 20*time.Second, "leaderrun to exit", func() bool {
		m = re.FindStringSubmatch(pty.Screen())
		return m != nil
	})
	code, _ := strconv.Atoi(m[1])
	return code
}

// shellGetsTerminalBack types a line for the shell that ran leaderrun: it
// reads it only if leaderrun gave the terminal back to the shell's group.
func shellGetsTerminalBack(t *testing.T, pty *testsupport.PTY, shell *Proc) {
	t.Helper()
	pty.Type(t, "back\n")
	waitFor(t, 5*time.Second, "the shell to read from the terminal after leaderrun", func() bool {
		return strings.Contains(pty.Screen(), "shell-read:back")
	})
	if code := shell.Wait(5 * time.Second); code != 0 {
		t.Fatalf("the shell exited %d", code)
	}
}

// holdsTerminal waits until the process in pidFile leads the terminal's
// foreground group, and returns its pid.
func holdsTerminal(t *testing.T, pidFile string) int {
	t.Helper()
	pid := readPID(t, pidFile)
	waitFor(t, 5*time.Second, "the job to be the terminal's foreground group", func() bool {
		return testsupport.ForegroundGroup(pid) == pid
	})
	return pid
}

func TestJobReadsTheTerminal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pty, shell := onTerminal(t, withCommand(localArgs(dir, "k"), "echo $$ > "+dir+"/child.pid; read -r x; echo got:$x")...)
	holdsTerminal(t, dir+"/child.pid")
	pty.Type(t, "hello\n")
	waitFor(t, 5*time.Second, "the job to read the typed line", func() bool {
		return strings.Contains(pty.Screen(), "got:hello")
	})
	if code := leaderrunExit(t, pty); code != 0 {
		t.Fatalf("leaderrun exited %d, want the child's 0", code)
	}
	shellGetsTerminalBack(t, pty, shell)
}

// Ctrl-C reaches the job (the foreground group), not leaderrun; leaderrun
// still ends as stopped by the operator: no restart, the rest of the job
// (a background process that ignores SIGINT, as a shell's & makes it) is
// stopped, and the exit code is 130 as for a SIGINT to leaderrun. Before
// that, with --restart always, the second child gets the terminal too:
// leaderrun took it back from the first and handed it on.
func TestCtrlCAtTheTerminalStopsLeaderrun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// The background process is recorded before the child's pid file,
	// which the test waits for before it types Ctrl-C.
	script := "sleep 300 & echo $! >> " + dir + "/bg.pids; " +
		"echo $$ > " + dir + "/child.$(cat " + dir + "/n 2>/dev/null || echo 1).pid; echo 2 > " + dir + "/n; read -r x; echo got:$x"
	pty, shell := onTerminal(t, withCommand(localArgs(dir, "k", "--restart", "always", "--restart-delay", "100ms"), script)...)
	holdsTerminal(t, dir+"/child.1.pid")
	pty.Type(t, "one\n")
	waitFor(t, 5*time.Second, "the first child to read the typed line", func() bool {
		return strings.Contains(pty.Screen(), "got:one")
	})
	second := holdsTerminal(t, dir+"/child.2.pid")
	pty.Type(t, "\x03")
	if code := leaderrunExit(t, pty); code != 130 {
		t.Fatalf("leaderrun exited %d after Ctrl-C, want 130", code)
	}
	if signals.ProcessAlive(second) {
		t.Fatalf("the child %d outlived leaderrun", second)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "bg.pids"))
	for _, f := range strings.Fields(string(b)) {
		if pid, _ := strconv.Atoi(f); signals.ProcessAlive(pid) {
			t.Fatalf("the job's background process %d outlived leaderrun", pid)
		}
	}
	if strings.Count(string(b), "\n") != 2 {
		t.Fatalf("%d children ran, want 2: Ctrl-C must not restart the job", strings.Count(string(b), "\n"))
	}
	shellGetsTerminalBack(t, pty, shell)
}

// Ctrl-Z cannot suspend a job that holds leadership: leaderrun warns and
// continues it, in the terminal's foreground, and it goes on reading.
func TestCtrlZAtTheTerminalDoesNotSuspendTheJob(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pty, shell := onTerminal(t, append(localArgs(dir, "k", "-q"), "--", "sh", "-c",
		"echo $$ > "+dir+"/child.pid; read -r x; echo got:$x")...)
	child := holdsTerminal(t, dir+"/child.pid")
	pty.Type(t, "\x1a")
	waitFor(t, 5*time.Second, "the warning that the job cannot be suspended", func() bool {
		return strings.Contains(pty.Screen(), "cannot be suspended")
	})
	waitFor(t, 5*time.Second, "the job to run again", func() bool {
		st, ok := signals.ReadStat(child)
		return ok && st.State != 'T'
	})
	if fg := testsupport.ForegroundGroup(child); fg != child {
		t.Fatalf("after Ctrl-Z the terminal's foreground group is %d, want the job's %d", fg, child)
	}
	pty.Type(t, "hello\n")
	waitFor(t, 5*time.Second, "the job to read the typed line", func() bool {
		return strings.Contains(pty.Screen(), "got:hello")
	})
	if code := leaderrunExit(t, pty); code != 0 {
		t.Fatalf("leaderrun exited %d, want the child's 0", code)
	}
	shellGetsTerminalBack(t, pty, shell)
}

// A leaderrun in the background of a job-control shell leaves the
// terminal alone: the job stops on SIGTTIN, as any background job does.
func TestBackgroundLeaderrunLeavesTheTerminal(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("needs bash for job control")
	}
	dir := t.TempDir()
	pty := testsupport.OpenPTY(t)
	args := withCommand(localArgs(dir, "k"), "echo $$ > "+dir+"/child.pid; read -r x; echo got:$x")
	cmd := exec.Command("bash", append([]string{"-c", `set -m; "$@" & echo $! > ` + dir + `/leaderrun.pid; wait $!; echo "leaderrun-exit:$?"`, "bash", binary}, args...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = pty.Slave, pty.Slave, pty.Slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		if pid, err := os.ReadFile(dir + "/leaderrun.pid"); err == nil {
			if n, _ := strconv.Atoi(strings.TrimSpace(string(pid))); n > 1 {
				_ = syscall.Kill(-n, syscall.SIGKILL)
			}
		}
		<-exited
		if t.Failed() {
			t.Logf("--- the terminal showed:\n%s", pty.Screen())
		}
	})
	child := readPID(t, dir+"/child.pid")
	leader := readPID(t, dir+"/leaderrun.pid")
	waitFor(t, 5*time.Second, "the background job to stop on SIGTTIN", func() bool {
		st, ok := signals.ReadStat(child)
		return ok && st.State == 'T'
	})
	if fg := testsupport.ForegroundGroup(child); fg != cmd.Process.Pid {
		t.Fatalf("the terminal's foreground group is %d, want the shell's %d", fg, cmd.Process.Pid)
	}
	_ = syscall.Kill(leader, syscall.SIGTERM)
	if code := leaderrunExit(t, pty); code != 143 {
		t.Fatalf("leaderrun exited %d after SIGTERM, want 143", code)
	}
	<-exited
}

// On a terminal, leaderrun says the job starts before the job can write
// anything: a log line written after the fork landed inside the job's own
// first output (its prompt) in about one run in four.
func TestStartLineBeforeTheJobsPrompt(t *testing.T) {
	t.Parallel()
	for i := range 20 {
		dir := t.TempDir()
		pty, shell := onTerminal(t, withCommand(localArgs(dir, "k"), "printf 'PROMPT> '; read -r x; echo got:$x")...)
		waitFor(t, 10*time.Second, "the job's prompt", func() bool {
			return strings.Contains(pty.Screen(), "PROMPT> ")
		})
		time.Sleep(200 * time.Millisecond)
		screen := pty.Screen()
		if after := screen[strings.Index(screen, "PROMPT> ")+len("PROMPT> "):]; after != "" {
			t.Fatalf("run %d: leaderrun wrote after the job's prompt, before anything was typed: %q\n--- the terminal showed:\n%s", i, after, screen)
		}
		if !strings.Contains(screen[:strings.Index(screen, "PROMPT> ")], "epoch=") {
			t.Fatalf("run %d: no start line with the epoch before the job's prompt:\n%s", i, screen)
		}
		pty.Type(t, "x\n")
		if code := leaderrunExit(t, pty); code != 0 {
			t.Fatalf("leaderrun exited %d, want the child's 0", code)
		}
		shellGetsTerminalBack(t, pty, shell)
	}
}
