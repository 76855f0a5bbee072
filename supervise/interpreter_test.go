package supervise

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// ResolveCommand judges a script's #! line as the kernel does: what it
// refuses does not run, with the code and words below, and what it accepts
// runs. Each script is also executed directly, so the check is held to the
// kernel's (and env's) verdict, not to its own idea of it.
func TestResolveCommandJudgesTheInterpreter(t *testing.T) {
	dir := t.TempDir()
	// An interpreter whose name really ends in a carriage return runs.
	crName := filepath.Join(dir, "interp\r")
	if err := os.Symlink("/bin/sh", crName); err != nil {
		t.Fatal(err)
	}
	notExec := filepath.Join(dir, "notexec")
	if err := os.WriteFile(notExec, []byte("data\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	long := "#!/" + strings.Repeat("a", 300) + "\necho hi\n"
	for _, tc := range []struct {
		name   string
		script string
		code   int    // 0: accepted
		says   string // in the message when refused
		// left: accepted, and whether it runs is for exec or the
		// interpreter to say
		left bool
	}{
		{"plain", "#!/bin/sh\necho hi\n", 0, "", false},
		{"spaces", "#!  /bin/sh  \necho hi\n", 0, "", false},
		{"with an argument", "#!/bin/sh -e\necho hi\n", 0, "", false},
		{"env", "#!/usr/bin/env sh\necho hi\n", 0, "", false},
		{"no #! line", "echo hi\n", 0, "", false},
		{"no newline", "#!/bin/sh", 0, "", false},
		{"CRLF", "#!/bin/sh\r\necho hi\r\n", ExitNotFound, "its #! line ends in a carriage return (CRLF line endings); convert it with dos2unix or sed -i 's/\\r$//'", false},
		// The CR is the interpreter's argument: some (perl, env -S) take it.
		{"CRLF with an argument", "#!/usr/bin/perl -w\r\nprint 1;\r\n", 0, "", true},
		{"CRLF after spaces", "#!/bin/sh  \r\necho hi\r\n", 0, "", true},
		{"CRLF with env", "#!/usr/bin/env sh\r\necho hi\r\n", ExitNotFound, "carriage return", false},
		{"CR in a name that exists", "#!" + crName + "\necho hi\n", 0, "", false},
		{"missing", "#!/nonexistent/sh\necho hi\n", ExitNotFound, "interpreter /nonexistent/sh (from its #! line) not found", false},
		{"missing with an argument", "#!/nonexistent/sh -e\necho hi\n", ExitNotFound, "interpreter /nonexistent/sh (from its #! line) not found", false},
		{"env missing", "#!/nonexistent/env sh\necho hi\n", ExitNotFound, "interpreter /nonexistent/env", false},
		{"not executable", "#!" + notExec + "\necho hi\n", ExitNotExecutable, "interpreter " + notExec + " (from its #! line) is not executable", false},
		{"a directory", "#!" + dir + "\necho hi\n", ExitNotExecutable, "is not executable", false},
		{"empty", "#!\necho hi\n", ExitNotExecutable, "empty #! line", false},
		{"longer than the kernel reads", long, 0, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			script := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			if err := os.WriteFile(script, []byte(tc.script), 0o755); err != nil {
				t.Fatal(err)
			}
			_, err := ResolveCommand(script)
			runs := runsToSuccess(t, script)
			if tc.name == "no #! line" {
				runs = runsToSuccess(t, "/bin/sh", script) // as forkExec falls back
			}
			if tc.code == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if !runs && !tc.left {
					t.Fatalf("accepted, but it does not run")
				}
				return
			}
			var se *StartError
			if !errors.As(err, &se) || se.Code != tc.code {
				t.Fatalf("got %v, want a StartError with code %d", err, tc.code)
			}
			if want := script + ": "; !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("message %q: want %q and %q", err, want, tc.says)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("message %q is more than one line", err)
			}
			if runs {
				t.Fatalf("refused, but it runs")
			}
		})
	}
}

// runsToSuccess runs argv and reports whether it exited 0. It starts the
// process through the package's reaper: once that reaps in this test
// binary, an os/exec Wait may find its child already taken.
func runsToSuccess(t *testing.T, argv ...string) bool {
	t.Helper()
	done := make(chan syscall.WaitStatus, 1)
	_, err := children.startProcess(func() (int, error) {
		return syscall.ForkExec(argv[0], argv, &syscall.ProcAttr{Env: []string{"PATH=/usr/bin:/bin"}, Files: []uintptr{0, 1, 2}})
	}, func(ws syscall.WaitStatus) { done <- ws })
	if err != nil {
		return false
	}
	ws := <-done
	return ws.Exited() && ws.ExitStatus() == 0
}
