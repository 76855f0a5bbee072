//go:build linux

// Package recipes runs each fencing recipe of docs/FENCING.md (the scripts,
// packages and SQL under examples/) against the real resource, with epochs
// and keys from real leaderrun runs: a leader's write is accepted, the
// write of a leader whose leadership ended is rejected, and the next
// leader's write is accepted again.
package recipes

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/chaos"
	"github.com/leaderrun/leaderrun/tests/testcluster"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// bins are leaderrun and its guard, built once for the package.
var bins chaos.Binaries

func TestMain(m *testing.M) { os.Exit(chaos.RunTests(m, &bins)) }

// examples is the repository's examples/ folder, where the recipes are.
func examples(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the test's source")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "examples")
}

// jobPath is the PATH of every job and recipe run: the recipes, leaderrun
// and the servers' own clients (etcdctl) first.
func jobPath(t testing.TB, tools ...string) string {
	dirs := []string{examples(t), filepath.Dir(bins.Leaderrun)}
	for _, tool := range tools {
		dirs = append(dirs, filepath.Dir(testcluster.Bin(t, tool)))
	}
	return strings.Join(append(dirs, os.Getenv("PATH")), ":")
}

// job is one leaderrun whose command runs init, saves its environment
// (what a recipe reads) and waits until the test lets it end.
type job struct {
	t    *testing.T
	name string
	dir  string
	proc *chaos.Proc
	// env is the command's environment once it leads, with whatever init
	// exported: the recipe's view of this leadership.
	env []string
}

// startJob starts leaderrun with args (backend and timing) and waits until
// its command leads and saved its environment.
func startJob(t *testing.T, name string, args []string, init string, env ...string) *job {
	t.Helper()
	dir := t.TempDir()
	j := &job{t: t, name: name, dir: dir}
	script := "set -e\n" + init + "\nenv > " + j.file("env.tmp") + "\nmv " + j.file("env.tmp") + " " + j.file("env") +
		"\nwhile [ ! -e " + j.file("go") + " ]; do sleep 0.02; done\n"
	p, err := chaos.Start(chaos.ProcSpec{
		Name: name, Path: bins.Leaderrun,
		Args:    append(append([]string{}, args...), "--id", name, "--", "sh", "-c", script),
		Env:     env,
		LogPath: j.file("log"),
	})
	if err != nil {
		t.Fatal(err)
	}
	j.proc = p
	t.Cleanup(func() {
		_ = os.WriteFile(j.file("go"), nil, 0o644)
		if _, ok := p.Wait(20 * time.Second); !ok {
			p.Kill()
		}
	})
	testsupport.WaitFor(t, 60*time.Second, name+" leads and its command starts", func() bool {
		_, err := os.Stat(j.file("env"))
		return err == nil || p.Exited()
	})
	if p.Exited() {
		t.Fatalf("%s: leaderrun exited %d before its command saved its environment:\n%s", name, p.Code(), p.Output(8<<10))
	}
	j.env = readEnv(t, j.file("env"))
	return j
}

func (j *job) file(name string) string { return filepath.Join(j.dir, name) }

// get is a variable of the command's environment.
func (j *job) get(name string) string {
	for _, kv := range j.env {
		if k, v, _ := strings.Cut(kv, "="); k == name {
			return v
		}
	}
	return ""
}

// end lets the command exit 0 and checks that leaderrun exits 0 after it:
// the leadership ends and is released.
func (j *job) end() {
	j.t.Helper()
	if err := os.WriteFile(j.file("go"), nil, 0o644); err != nil {
		j.t.Fatal(err)
	}
	code, ok := j.proc.Wait(30 * time.Second)
	if !ok || code != 0 {
		j.t.Fatalf("%s: leaderrun did not exit 0 after its command (exited %v, code %d):\n%s", j.name, ok, code, j.proc.Output(8<<10))
	}
}

// readEnv parses `env` output; a value with a newline keeps only its first
// line, which no variable a recipe reads has.
func readEnv(t testing.TB, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var env []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "=") {
			env = append(env, sc.Text())
		}
	}
	return env
}

// sh runs a recipe's shell command with env (a job's saved environment)
// and returns its exit status and output.
func sh(t testing.TB, env []string, command string) (int, string) {
	t.Helper()
	cmd := exec.Command("sh", "-c", command)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		code = testsupport.ExitStatus(err)
		if code < 0 {
			t.Fatalf("run %q: %v", command, err)
		}
	}
	return code, string(out)
}

// writer is one recipe's write: it writes value as the leadership whose
// environment is env, and reports whether the resource accepted it.
type writer func(t *testing.T, env []string, value string) bool

// proveFence runs the scenario every recipe must pass. Leader A writes
// (accepted) and its leadership ends; leader B, with a higher epoch,
// writes (accepted); A writes again, late, as a stale leader (rejected:
// the resource still holds B's value); B writes again (accepted). args
// start leaderrun on the backend; init runs at the start of each job.
func proveFence(t *testing.T, args []string, init string, env []string, write writer, read func(t *testing.T) string) {
	t.Helper()
	a := startJob(t, "a", args, init, env...)
	if !write(t, a.env, "a1") {
		t.Fatalf("the leader's write was rejected")
	}
	if got := read(t); got != "a1" {
		t.Fatalf("after the leader's write the resource holds %q, want a1", got)
	}
	a.end()

	b := startJob(t, "b", args, init, env...)
	ea, eb := a.get("LEADER_EPOCH"), b.get("LEADER_EPOCH")
	t.Logf("epoch of a: %s, of b: %s", ea, eb)
	if ea == "" || ea == eb {
		t.Fatalf("epochs of a (%q) and b (%q) must differ", ea, eb)
	}
	if !write(t, b.env, "b1") {
		t.Fatalf("the new leader's write was rejected")
	}
	if write(t, a.env, "a2") {
		t.Errorf("the stale leader's write (epoch %s, after epoch %s wrote) was accepted", ea, eb)
	}
	if got := read(t); got != "b1" {
		t.Errorf("after the stale write the resource holds %q, want b1", got)
	}
	if !write(t, b.env, "b2") {
		t.Fatalf("the leader's write after a stale one was rejected")
	}
	if got := read(t); got != "b2" {
		t.Fatalf("the resource holds %q, want b2", got)
	}
	b.end()
}
