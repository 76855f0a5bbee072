//go:build linux

package cmdline

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/leaderrun/leaderrun/internal/exitcode"
)

// The command line's surface: where options may go, what the environment
// sets, what a typo gets, which combinations are refused, and what help
// shows.

// TestOptionsAfterTheKey: status and check take their options after KEY,
// as their synopsis shows; after "--" nothing is an option.
func TestOptionsAfterTheKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// A fresh key: status reads it and says it was never used (exit 3).
	code, out, errOut := leaderrun(t, nil, "status", "billing", "--json", "--backend", "local", "--lock-dir", dir)
	if code != exitcode.StatusNeverUsed || !strings.Contains(out, `"key": "billing"`) || !strings.Contains(out, `"backend": "local"`) {
		t.Errorf("status billing --json --backend local: exit %d\n%s%s", code, out, errOut)
	}
	code, _, errOut = leaderrun(t, nil, "check", "billing", "--epoch", "3", "--backend=local", "--lock-dir", dir)
	if code != 1 || !strings.Contains(errOut, `epoch 3 does not hold key "billing": no leader`) {
		t.Errorf("check billing --epoch 3: exit %d, %q; want 1 and no leader", code, errOut)
	}
	// Options on both sides of the key.
	code, out, errOut = leaderrun(t, nil, "status", "--backend", "local", "billing", "--lock-dir", dir, "--json")
	if code != exitcode.StatusNeverUsed || !strings.Contains(out, `"key": "billing"`) {
		t.Errorf("status --backend local billing --lock-dir D --json: exit %d\n%s%s", code, out, errOut)
	}
	// After --, --json is an argument: a second KEY.
	code, _, errOut = leaderrun(t, nil, "status", "--backend", "local", "--lock-dir", dir, "--", "billing", "--json")
	if code != 125 || !strings.Contains(errOut, `status takes at most one KEY argument, got 2: ["billing" "--json"]`) {
		t.Errorf("status -- billing --json: exit %d, %q; want --json taken as a second KEY", code, errOut)
	}
	// A run's command keeps its own options, and -- before status still
	// runs a program of that name (not found here: 127).
	code, _, errOut = leaderrun(t, []string{"PATH=" + dir}, "--backend", "local", "--lock-dir", dir, "--key", "k", "--log-level", "off",
		"--", "status", "billing", "--json")
	if code != 127 {
		t.Errorf("-- status billing --json: exit %d, %q; want 127 (no program named status)", code, errOut)
	}
}

// TestEveryOptionHasItsVariable walks every option of a run, status and
// check: each reads LEADERRUN_<OPTION>, or is one of the exceptions the
// man page and help name, and those read no variable at all.
func TestEveryOptionHasItsVariable(t *testing.T) {
	t.Parallel()
	exceptions := []string{"help", "version", "unit"}
	app := newApp(nil)
	lists := map[string][]cli.Flag{"run": app.Flags}
	for _, cmd := range app.Commands {
		if !cmd.Hidden {
			lists[cmd.Name] = cmd.Flags
		}
	}
	for where, flags := range lists {
		for _, f := range flags {
			name := f.Names()[0]
			if name == "generate-bash-completion" {
				continue
			}
			d := docFlag(f)
			if slices.Contains(exceptions, name) {
				if len(d.Env) > 0 {
					t.Errorf("%s: --%s is listed as having no variable but reads %q", where, name, d.Env)
				}
				continue
			}
			if !slices.Contains(d.Env, ruleEnv(d.Name)) {
				t.Errorf("%s: --%s does not read %s (it reads %q)", where, name, ruleEnv(d.Name), d.Env)
			}
		}
	}
	page, err := manPage(app)
	if err != nil {
		t.Fatal(err)
	}
	env := page[strings.Index(page, ".SH ENVIRONMENT"):]
	env = strings.ReplaceAll(env[:strings.Index(env, ".SH FILES")], "\n", " ")
	said := "except --help, --version and --unit."
	if !strings.Contains(env, roffText(said)) {
		t.Errorf("the man page's ENVIRONMENT does not say %q:\n%s", said, env)
	}
	_, help, _ := leaderrun(t, nil, "help", "all")
	if said := "--help, --version and --unit have no variable"; !strings.Contains(strings.Join(strings.Fields(help), " "), said) {
		t.Errorf("help all does not say %q", said)
	}
}

// TestVariablesTheIssueFoundIgnored: LEADERRUN_JSON, LEADERRUN_EPOCH and
// LEADERRUN_ENV_FILE, and that the child does not read the files again.
func TestVariablesTheIssueFoundIgnored(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	local := []string{"--backend", "local", "--lock-dir", dir}
	code, out, errOut := leaderrun(t, []string{"LEADERRUN_JSON=1"}, append([]string{"status"}, append(local, "billing")...)...)
	if code != exitcode.StatusNeverUsed || !strings.HasPrefix(out, "{") {
		t.Errorf("LEADERRUN_JSON=1 status: exit %d, want JSON:\n%s%s", code, out, errOut)
	}
	code, _, errOut = leaderrun(t, []string{"LEADERRUN_EPOCH=3"}, append([]string{"check"}, append(local, "billing")...)...)
	if code != 1 || !strings.Contains(errOut, "epoch 3 does not hold") {
		t.Errorf("LEADERRUN_EPOCH=3 check: exit %d, %q; want 1, epoch 3 does not hold", code, errOut)
	}
	// The variable leaderrun gives its child wins over LEADERRUN_EPOCH.
	code, _, errOut = leaderrun(t, []string{"LEADER_EPOCH=4", "LEADERRUN_EPOCH=3"}, append([]string{"check"}, append(local, "billing")...)...)
	if code != 1 || !strings.Contains(errOut, "epoch 4 does not hold") {
		t.Errorf("LEADER_EPOCH=4 LEADERRUN_EPOCH=3 check: exit %d, %q; want LEADER_EPOCH's 4", code, errOut)
	}
	file := filepath.Join(dir, "billing.env")
	if err := os.WriteFile(file, []byte("LEADERRUN_BACKEND=local\nLEADERRUN_LOCK_DIR="+dir+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = leaderrun(t, []string{"LEADERRUN_ENV_FILE=" + file}, "status", "--json", "billing")
	if code != exitcode.StatusNeverUsed || !strings.Contains(out, `"backend": "local"`) {
		t.Errorf("LEADERRUN_ENV_FILE status: exit %d, want the file's backend:\n%s%s", code, out, errOut)
	}
	// --env-file on the command line wins over the variable.
	code, _, errOut = leaderrun(t, []string{"LEADERRUN_ENV_FILE=" + file}, "status", "--env-file", filepath.Join(dir, "other.env"), "billing")
	if code != 125 || !strings.Contains(errOut, "other.env does not exist") {
		t.Errorf("--env-file with LEADERRUN_ENV_FILE: exit %d, %q", code, errOut)
	}
	// The run's command line wins over the file, also for a check the
	// child runs: the child does not read the file again.
	other := t.TempDir()
	env := filepath.Join(dir, "child.env")
	code, out, errOut = leaderrunWithin(t, 20*time.Second, []string{"LEADERRUN_ENV_FILE=" + file}, "--lock-dir", other, "--key", "k", "--log-level", "off",
		"--", "sh", "-c", `echo "dir=$LEADERRUN_LOCK_DIR file=${LEADERRUN_ENV_FILE-unset}" > `+env)
	if code != 0 {
		t.Fatalf("run with LEADERRUN_ENV_FILE: exit %d\n%s%s", code, out, errOut)
	}
	if b, _ := os.ReadFile(env); strings.TrimSpace(string(b)) != "dir="+other+" file=unset" {
		t.Errorf("the child's environment: %q, want the command line's lock dir and no LEADERRUN_ENV_FILE", b)
	}
}

// TestTyposGetASuggestion: an unknown command or option names the nearest
// one; "--" before a word still makes it the program to run.
func TestTyposGetASuggestion(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	local := []string{"--backend", "local", "--lock-dir", dir}
	cases := []struct {
		name string
		args []string
		line string // stderr's first part, after "leaderrun: "
	}{
		{"command", []string{"stauts", "x"}, `unknown command "stauts"; did you mean "status"?`},
		{"command with a key", append(local, "--key", "k", "chek"), `unknown command "chek"; did you mean "check"?`},
		{"no command, no key", []string{"nightly-report"}, `unknown command "nightly-report": the commands are status, history, check, step-down, pause, resume, help, version; a program to run goes after --`},
		{"run option", append(local, "--ttll", "5s", "--key", "k", "--", "true"), "unknown option --ttll (did you mean --ttl?)"},
		{"run option prefix", []string{"--acquire", "5s"}, "unknown option --acquire (did you mean --acquire-timeout?)"},
		{"status option", []string{"status", "k", "--jsn"}, "unknown option --jsn (did you mean --json?)"},
		{"run option on status", []string{"status", "k", "--once-per", "1h"}, "unknown option --once-per (it is an option of a run, not of status)"},
		{"--holders on check", []string{"check", "k", "--holders", "2", "--epoch", "1"}, "unknown option --holders (it is an option of a run and of status; check reads one slot: --slot S)"},
		{"nothing near", []string{"--zzzzzz"}, "unknown option --zzzzzz (leaderrun help all lists them)"},
		{"help topic", []string{"help", "stauts"}, `help: no command or backend "stauts"; did you mean "status"?`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			code, _, errOut := leaderrun(t, nil, c.args...)
			if code != 125 || !strings.HasPrefix(errOut, "leaderrun: "+c.line) || strings.Count(errOut, "\n") != 1 {
				t.Errorf("%q: exit %d, stderr:\n%s\nwant 125 and one line starting\nleaderrun: %s", c.args, code, errOut, c.line)
			}
		})
	}
	// After --, a word near a command is the program to run.
	prog := filepath.Join(dir, "stauts")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\necho ran > "+dir+"/stauts.ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := leaderrun(t, []string{"PATH=" + dir + ":" + os.Getenv("PATH")}, append(local, "--key", "k", "--log-level", "off", "--", "stauts")...)
	if b, _ := os.ReadFile(filepath.Join(dir, "stauts.ran")); code != 0 || string(b) != "ran\n" {
		t.Errorf("-- stauts: exit %d, %q; want the program stauts run", code, errOut)
	}
	// A word far from any command, with --key, is still the command.
	code, _, errOut = leaderrun(t, nil, append(local, "--key", "k", "--log-level", "off", "true")...)
	if code != 0 {
		t.Errorf("--key k true (no --): exit %d, %q; want true run", code, errOut)
	}
}

// TestContradictionsAreRefused: options that contradict each other, or do
// nothing without another, exit 125 naming both before anything starts;
// only options that were set count, wherever they were set.
func TestContradictionsAreRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ran := filepath.Join(dir, "ran")
	job := []string{"--", "sh", "-c", "echo ran >> " + ran}
	run := func(opts ...string) []string {
		return slices.Concat([]string{"--backend", "local", "--lock-dir", dir, "--key", "k", "--no-guard"}, opts, job)
	}
	envFile := filepath.Join(dir, "quiet.env")
	if err := os.WriteFile(envFile, []byte("LEADERRUN_QUIET=1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	refused := []struct {
		name string
		env  []string
		args []string
		line string
	}{
		{"restart always, once-per", nil, run("--restart", "always", "--once-per", "1h"),
			"--restart always and --once-per contradict: a slot runs once, a restart would run it again"},
		{"restart on-failure, once-record start", nil, run("--restart", "on-failure", "--run-id", "r1", "--once-record", "start"),
			"--restart on-failure and --once-record start contradict: --once-record start runs a slot at most once, a restart would run it again"},
		{"restart from the environment", []string{"LEADERRUN_RESTART=always", "LEADERRUN_ONCE_PER=1h"}, run(),
			"--restart always and --once-per contradict: a slot runs once, a restart would run it again"},
		{"quiet, log-level debug", nil, run("-q", "--log-level", "debug"),
			"-q/--quiet and --log-level debug contradict: --quiet logs warnings and errors only; give one of them"},
		{"quiet from an env file, log-level info", nil, run("--env-file", envFile, "--log-level", "INFO"),
			"-q/--quiet and --log-level INFO contradict"},
		{"no-wait, acquire-timeout", nil, run("--no-wait", "--acquire-timeout", "5s"),
			"--no-wait and --acquire-timeout contradict: --no-wait makes one attempt, so there is no wait to bound"},
		{"conflict-exit alone", nil, run("--conflict-exit", "0"),
			"--conflict-exit needs --no-wait, --acquire-timeout, --once-per or --run-id: without them leaderrun waits until it leads, and no conflict ends the run"},
		{"once-record alone", nil, run("--once-record", "start"), "--once-record needs --once-per or --run-id"},
	}
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			code, _, errOut := leaderrunWithin(t, 20*time.Second, c.env, c.args...)
			if code != 125 || !strings.HasPrefix(errOut, "leaderrun: "+c.line) || strings.Count(errOut, "\n") != 1 {
				t.Errorf("exit %d, stderr:\n%s\nwant 125 and one line starting\nleaderrun: %s", code, errOut, c.line)
			}
		})
	}
	if _, err := os.Stat(ran); err == nil {
		t.Fatal("a refused command line ran the job")
	}
	accepted := []struct {
		name string
		env  []string
		args []string
	}{
		{"restart never, once-per", nil, run("--restart", "never", "--once-per", "1h")},
		// A failed run of the slot is retried until one succeeds.
		{"restart on-failure, run-id", nil, run("--restart", "on-failure", "--run-id", "r2")},
		{"quiet, log-level warn", nil, run("-q", "--log-level", "warn")},
		{"quiet off, log-level debug", []string{"LEADERRUN_QUIET=false"}, run("--log-level", "debug")},
		{"no-wait off, acquire-timeout", nil, run("--no-wait=false", "--acquire-timeout", "5s")},
		{"conflict-exit, acquire-timeout", nil, run("--conflict-exit", "0", "--acquire-timeout", "5s")},
		{"conflict-exit, no-wait from the environment", []string{"LEADERRUN_NO_WAIT=1"}, run("--conflict-exit", "3")},
	}
	for _, c := range accepted {
		t.Run(c.name, func(t *testing.T) {
			if code, _, errOut := leaderrunWithin(t, 20*time.Second, c.env, c.args...); code != 0 {
				t.Errorf("exit %d, %q; want the job run", code, errOut)
			}
		})
	}
}

// leaderrunWithin is leaderrun, killed after d: a command line that
// should be refused may, on a leaderrun that accepts it, run forever.
func leaderrunWithin(t *testing.T, d time.Duration, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append([]string{"LEADERRUN_TEST_RUN_MAIN=1", "PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Errorf("%q still ran after %v; killed", args, d)
		code = -1
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("run %v: %v", args, err)
	}
	return code, out.String(), errOut.String()
}

// helpRows is how many rows text takes on an 80-column terminal.
func helpRows(text string) int {
	rows := 0
	for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		rows += max(1, (len(line)+79)/80)
	}
	return rows
}

// TestShortHelp: --help fits a screen: the run synopsis, the essential
// options by group, examples and where the rest is.
func TestShortHelp(t *testing.T) {
	t.Parallel()
	code, help, errOut := leaderrun(t, nil, "--help")
	if code != 0 || errOut != "" {
		t.Fatalf("--help: exit %d, %q", code, errOut)
	}
	if n := helpRows(help); n > 40 {
		t.Errorf("--help takes %d rows of an 80-column terminal, want at most 40:\n%s", n, help)
	}
	if !strings.HasPrefix(help, "Usage: "+synopsisRun+"\n") {
		t.Errorf("--help does not start with the run synopsis:\n%s", help)
	}
	entries := flagEntries(help)
	for _, name := range []string{"--key", "--backend", "--once-per", "--acquire-timeout", "--no-wait", "--ttl", "--kill-grace",
		"--restart", "--stop-signal", "--quiet", "--log-level", "--env-file"} {
		if _, ok := entries[name]; !ok {
			t.Errorf("--help lacks %s", name)
		}
	}
	if _, ok := entries["--consul-addr"]; ok {
		t.Error("--help lists a backend's options")
	}
	for _, title := range []string{"Leadership:", "Timing:", "Child:", "Output:", examplesTitle} {
		if !strings.Contains(help, "\n"+title+"\n") {
			t.Errorf("--help lacks the group %q", title)
		}
	}
	examples := helpExamples(t)
	if len(examples) < 3 || len(examples) > 5 {
		t.Errorf("the examples are %d lines, want 3 to 5:\n%q", len(examples), examples)
	}
	for i, line := range strings.Split(help, "\n") {
		if len(line) > 80 && !slices.Contains(examples, strings.TrimSpace(line)) {
			t.Errorf("--help line %d is %d columns wide: %q", i+1, len(line), line)
		}
	}
	flat := strings.Join(strings.Fields(help), " ")
	for _, w := range []string{"'leaderrun help all'", "'leaderrun help BACKEND' (" + backendList(), "--version (there is no -v)"} {
		if !strings.Contains(flat, w) {
			t.Errorf("--help does not say %q", w)
		}
	}
}

// TestBackendHelp: `help NAME` shows that backend's options, as the
// registry lists them, and nothing else.
func TestBackendHelp(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		code, help, errOut := leaderrun(t, nil, "help", b.Name)
		if code != 0 {
			t.Errorf("help %s: exit %d, %q", b.Name, code, errOut)
			continue
		}
		var got, want []string
		for name := range flagEntries(help) {
			got = append(got, name)
		}
		for _, f := range b.Flags() {
			want = append(want, "--"+f.Names()[0])
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("help %s lists %q, the backend has %q", b.Name, got, want)
		}
		if !strings.Contains(help, "\n"+b.Category+":\n") {
			t.Errorf("help %s lacks its group %q:\n%s", b.Name, b.Category, help)
		}
	}
}

// TestQueryHelpListsWhatItUses: status and check do not list options only
// a run uses, and still accept them.
func TestQueryHelpListsWhatItUses(t *testing.T) {
	t.Parallel()
	runOnly := []string{"consul-lock-delay", "consul-session-checks"} // a read creates no session
	for _, cmd := range []string{"status", "check"} {
		_, help, _ := leaderrun(t, nil, "help", cmd)
		entries := flagEntries(help)
		for _, name := range runOnly {
			if _, ok := entries["--"+name]; ok {
				t.Errorf("help %s lists --%s, which only a run uses", cmd, name)
			}
		}
		if !strings.Contains(strings.Join(strings.Fields(help), " "), "'leaderrun help BACKEND'") {
			t.Errorf("help %s does not say where the backend's options are", cmd)
		}
	}
	dir := t.TempDir()
	code, _, errOut := leaderrun(t, nil, "status", "--backend", "local", "--lock-dir", dir, "--consul-lock-delay", "5s", "k")
	if code != exitcode.StatusNeverUsed {
		t.Errorf("status with --consul-lock-delay: exit %d, %q; want it accepted", code, errOut)
	}
}

// TestNoShortVersionFlag: -v is not --version.
func TestNoShortVersionFlag(t *testing.T) {
	t.Parallel()
	code, out, errOut := leaderrun(t, nil, "-v")
	if code != 125 || out != "" || !strings.Contains(errOut, "unknown option -v (--version prints the version") {
		t.Errorf("-v: exit %d, stdout %q, stderr %q; want 125 pointing at --version", code, out, errOut)
	}
	if code, out, _ := leaderrun(t, nil, "--version"); code != 0 || !strings.HasPrefix(out, "leaderrun ") {
		t.Errorf("--version: exit %d, %q", code, out)
	}
}

// docLines are the lines of README.md and docs/*.md.
func docLines(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, f := range append(files, "../../README.md") {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, strings.Split(string(b), "\n")...)
	}
	return lines
}

// TestExamplesAreTheReadmes: every line of the man page's literal examples
// and of --help's examples is in README.md or docs/*.md, and the README's
// recommended cron line is in both, so that neither can drift.
func TestExamplesAreTheReadmes(t *testing.T) {
	t.Parallel()
	docs := docLines(t)
	inDocs := func(line string) bool {
		return slices.ContainsFunc(docs, func(d string) bool { return strings.Contains(d, line) })
	}
	manExamples := manExampleLines()
	if len(manExamples) == 0 {
		t.Fatal("the man page has no literal examples")
	}
	examples := helpExamples(t)
	for _, line := range slices.Concat(manExamples, examples) {
		if !inDocs(line) {
			t.Errorf("example %q is not in README.md or docs/*.md", line)
		}
	}
	cron := regexp.MustCompile(`^\s+([0-9*]+ ){5} *leaderrun .*$`)
	var readmeCron string
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(readme), "\n") {
		if cron.MatchString(line) {
			readmeCron = strings.TrimSpace(line)
			break
		}
	}
	if readmeCron == "" {
		t.Fatal("README.md has no crontab line")
	}
	if !slices.Contains(manExamples, readmeCron) || !slices.Contains(examples, readmeCron) {
		t.Errorf("the README's cron line is not among the man page's and --help's examples:\n%s", readmeCron)
	}
	page, err := manPage(newApp(nil))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(page, roffText(readmeCron)) {
		t.Error("the generated man page lacks the README's cron line")
	}
	if strings.Contains(page, "/usr/share/doc/leaderrun/example.env") || !strings.Contains(page, roffText("/usr/share/leaderrun/example.env")) {
		t.Error("the man page must point at /usr/share/leaderrun/example.env for the example settings")
	}
}

// helpExamples are the lines of --help's examples.
func helpExamples(t *testing.T) []string {
	t.Helper()
	_, help, _ := leaderrun(t, nil, "--help")
	i := strings.Index(help, "\nExamples")
	if i < 0 {
		return nil
	}
	block := help[i+1:]
	block = block[strings.Index(block, "\n")+1:]
	if j := strings.Index(block, "\n\n"); j >= 0 {
		block = block[:j]
	}
	// A line ending in " \" goes on on the next.
	var lines []string
	joined := ""
	for _, l := range strings.Split(block, "\n") {
		l = strings.TrimSpace(l)
		if more, ok := strings.CutSuffix(l, " \\"); ok {
			joined += more + " "
			continue
		}
		lines = append(lines, joined+l)
		joined = ""
	}
	return lines
}
