package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// Distributed cron: one attempt with --no-wait, quiet runs and skips, a
// chosen exit code for "someone else has it" (issue: cron done right).

func TestNoWaitUnreachableBackendExits125AtOnce(t *testing.T) {
	t.Parallel()
	silent := testsupport.SilentServer(t)
	cases := []struct {
		name string
		args []string
		addr string
		dial time.Duration
	}{
		{"etcd refuses", etcdArgs([]string{"127.0.0.1:1"}, newKey("nowait"), "--etcd-dial-timeout", "2s"), "127.0.0.1:1", 2 * time.Second},
		{"consul refuses", consulArgs("127.0.0.1:1", newKey("nowait")), "127.0.0.1:1", 5 * time.Second},
		{"etcd silent", etcdArgs([]string{silent}, newKey("nowait"), "--etcd-dial-timeout", "2s"), silent, 2 * time.Second},
		{"consul silent", consulArgs(silent, newKey("nowait")), silent, 5 * time.Second},
		// go-zookeeper's Close waits up to 1s for its goodbye to a server
		// that never answered: the attempt's bound is dial + 1s.
		{"zookeeper refuses", zkArgs([]string{"127.0.0.1:1"}, newKey("nowait")), "127.0.0.1:1", 6 * time.Second},
		{"zookeeper silent", zkArgs([]string{silent}, newKey("nowait")), silent, 6 * time.Second},
		{"kubernetes refuses", kubeArgs(unreachableKubeconfig(t, "127.0.0.1:1"), newKey("nowait")), "https://127.0.0.1:1", 5 * time.Second},
		{"kubernetes silent", kubeArgs(unreachableKubeconfig(t, silent), newKey("nowait")), "https://" + silent, 5 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			began := time.Now()
			p := start(t, c.name, nil, append(withoutLogLevel(c.args), "--no-wait", "-q", "--", "true")...)
			code := p.Wait(30 * time.Second)
			took := time.Since(began)
			out := strings.TrimSpace(p.Output())
			if code != 125 {
				t.Fatalf("exit %d, want 125\n%s", code, out)
			}
			if took > c.dial+time.Second {
				t.Fatalf("took %v, want under the dial timeout %v + 1s", took, c.dial)
			}
			if strings.Count(out, "\n") != 0 || !strings.Contains(out, "one attempt at "+c.addr+" failed") {
				t.Fatalf("want one line naming %s as what was tried, got:\n%s", c.addr, out)
			}
		})
	}
}

// unreachableIsAnOutage runs args (an unreachable backend, an acquire
// timeout of 2s) as cron would: quiet, a conflict mapped to 0. An outage is
// not a conflict: exit 125, and a WARN line that --quiet keeps, naming the
// address, at the timeout plus one read of the holder.
func unreachableIsAnOutage(t *testing.T, args []string) {
	t.Helper()
	p := start(t, "unreachable", nil, append(args, "-q", "--conflict-exit", "0", "--", "true")...)
	began := time.Now()
	code := p.Wait(20 * time.Second)
	out := p.Output()
	if code != 125 {
		t.Fatalf("exit %d, want 125 (an outage is not a conflict)\n%s", code, out)
	}
	if took := time.Since(began); took > 7*time.Second {
		t.Fatalf("took %v with --acquire-timeout 2s", took)
	}
	// The last line says it all: the address tried and the last error.
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	if !strings.Contains(last, "[WARN]  leaderrun: not acquired within --acquire-timeout: the backend could not be reached") ||
		!strings.Contains(last, "address=127.0.0.1:1 ") || !strings.Contains(last, "error=\"") {
		t.Fatalf("want a last WARN line naming the address and the last error under -q, got:\n%s", out)
	}
}

// unreachableKubeconfig writes a kubeconfig whose only cluster is addr.
func unreachableKubeconfig(t *testing.T, addr string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := "apiVersion: v1\nkind: Config\ncurrent-context: c\n" +
		"clusters:\n- name: c\n  cluster:\n    server: https://" + addr + "\n    insecure-skip-tls-verify: true\n" +
		"users:\n- name: u\n  user:\n    token: t\n" +
		"contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\n"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestNoWaitHasItsEnvironmentVariable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	start(t, "holder", nil, withCommand(localArgs(dir, "k"), "echo $$ > "+dir+"/holder.pid; exec sleep 1000")...)
	readPID(t, dir+"/holder.pid")
	p := start(t, "env no-wait", []string{"LEADERRUN_NO_WAIT=true"}, append(localArgs(dir, "k"), "--", "true")...)
	if got := p.Wait(10 * time.Second); got != 124 {
		t.Fatalf("LEADERRUN_NO_WAIT=true while held: exit %d, want 124\n%s", got, p.Output())
	}
}

func TestQuietRunsPrintNothingOnSuccessAndSkip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ok := start(t, "quiet success", nil, append(localArgs(dir, "q1", "-q"), "--", "true")...)
	if code := ok.Wait(10 * time.Second); code != 0 || ok.Output() != "" {
		t.Fatalf("-q success: exit %d, output %q; want 0 and nothing", code, ok.Output())
	}
	start(t, "holder", nil, withCommand(localArgs(dir, "q2"), "echo $$ > "+dir+"/holder.pid; exec sleep 1000")...)
	readPID(t, dir+"/holder.pid")
	skip := start(t, "quiet skip", []string{"LEADERRUN_QUIET=1"}, append(localArgs(dir, "q2", "--no-wait"), "--", "true")...)
	if code := skip.Wait(10 * time.Second); code != 124 || skip.Output() != "" {
		t.Fatalf("-q skip: exit %d, output %q; want 124 and nothing", code, skip.Output())
	}
	zero := start(t, "conflict-exit 0", nil, append(localArgs(dir, "q2", "--no-wait", "-q", "--conflict-exit", "0"), "--", "true")...)
	if code := zero.Wait(10 * time.Second); code != 0 || zero.Output() != "" {
		t.Fatalf("--conflict-exit 0: exit %d, output %q; want 0 and nothing", code, zero.Output())
	}
	env := start(t, "LEADERRUN_CONFLICT_EXIT", []string{"LEADERRUN_CONFLICT_EXIT=3"}, append(localArgs(dir, "q2", "--no-wait"), "--", "true")...)
	if code := env.Wait(10 * time.Second); code != 3 {
		t.Fatalf("LEADERRUN_CONFLICT_EXIT=3: exit %d, want 3", code)
	}
	// The skip line names the holder once: id, host, pid, since when.
	out := env.Output()
	host, _ := os.Hostname()
	for _, want := range []string{"host " + host, "pid ", " since "} {
		if !strings.Contains(out, want) {
			t.Fatalf("skip line does not name %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "held by") != 1 {
		t.Fatalf("skip line says \"held by\" more than once:\n%s", out)
	}
	// A child's own 124 is not a conflict. (--conflict-exit needs a bound
	// on the wait: without one no conflict can end the run.)
	own := start(t, "child exits 124", nil, withCommand(localArgs(dir, "q3", "--conflict-exit", "0", "--acquire-timeout", "5s"), "exit 124")...)
	if code := own.Wait(10 * time.Second); code != 124 {
		t.Fatalf("child's own 124 with --conflict-exit 0: exit %d, want 124", code)
	}
}

func TestCronBadInputIsOneLineAnd125(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cases := []struct {
		name string
		args []string
		flag string
	}{
		{"conflict-exit out of range", localArgs(dir, "k", "--conflict-exit", "300"), "--conflict-exit"},
		{"period below 1s", localArgs(dir, "k", "--once-per", "500ms"), "--once-per"},
		{"period not whole seconds", localArgs(dir, "k", "--once-per", "1500ms"), "--once-per"},
		{"run-id with a slash", localArgs(dir, "k", "--run-id", "a/b"), "--run-id"},
		{"unknown once-record", localArgs(dir, "k", "--once-per", "1h", "--once-record", "end"), "--once-record"},
		{"once-record alone", localArgs(dir, "k", "--once-record", "start"), "--once-record"},
		{"catch-up without once-per", localArgs(dir, "k", "--catch-up", "1h"), "--catch-up"},
		{"catch-up negative", localArgs(dir, "k", "--once-per", "1d", "--catch-up", "-1h"), "--catch-up"},
		{"catch-up zero", localArgs(dir, "k", "--once-per", "1d", "--catch-up", "0s"), "--catch-up"},
		{"catch-up longer than the period", localArgs(dir, "k", "--once-per", "1h", "--catch-up", "2h"), "--catch-up"},
		{"catch-up with run-id", localArgs(dir, "k", "--once-per", "1h", "--run-id", "x", "--catch-up", "1h"), "--catch-up"},
		{"catch-up with holders", localArgs(dir, "k", "--once-per", "1h", "--catch-up", "1h", "--holders", "2"), "--catch-up"},
		{"relative lock dir", []string{"--backend", "local", "--lock-dir", "locks", "--key", "k"}, "--lock-dir"},
		{"relative state dir", localArgs(dir, "k", "--state-dir", "state"), "--state-dir"},
	}
	for _, c := range cases {
		p := start(t, c.name, nil, append(c.args, "--", "true")...)
		code := p.Wait(10 * time.Second)
		out := strings.TrimSpace(p.Output())
		if code != 125 || strings.Count(out, "\n") != 0 || !strings.Contains(out, c.flag) {
			t.Errorf("%s: exit %d, want 125 and one line naming %s:\n%s", c.name, code, c.flag, out)
		}
	}
}

// withoutLogLevel drops a --log-level and its value: -q with an explicit
// --log-level is refused as a contradiction.
func withoutLogLevel(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		if args[i] == "--log-level" {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}
