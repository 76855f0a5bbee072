package cmdline

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/internal/exitcode"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// TestMain lets the CLI tests run this test binary as leaderrun itself:
// what they check is the text and exit code an operator sees.
func TestMain(m *testing.M) {
	if os.Getenv("LEADERRUN_TEST_RUN_MAIN") == "1" {
		if os.Getenv("LEADERRUN_TEST_FAKE_BACKEND") == "1" {
			backends = append(backends, fakeBackend)
		}
		if dir := os.Getenv("LEADERRUN_TEST_CONFIG_DIR"); dir != "" {
			configDir = dir
		}
		os.Exit(Main(os.Args))
	}
	os.Exit(m.Run())
}

// leaderrun runs the CLI with args in a clean environment plus env.
func leaderrun(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append([]string{"LEADERRUN_TEST_RUN_MAIN=1", "PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("run %v: %v", args, err)
	}
	return code, out.String(), errOut.String()
}

// flagEntries splits a help text's option lines into one string per
// option (its head line plus continuation lines).
func flagEntries(help string) map[string]string {
	entries := map[string]string{}
	var cur string
	for _, line := range strings.Split(help, "\n") {
		switch {
		case strings.HasPrefix(line, "  --"):
			cur = strings.Fields(line)[0]
			cur = strings.TrimSuffix(cur, ",")
			entries[cur] = line
		case cur != "" && strings.HasPrefix(line, strings.Repeat(" ", helpColumn)):
			entries[cur] += "\n" + line
		default:
			cur = ""
		}
	}
	return entries
}

// TestHelp checks `leaderrun help all`, the whole list of a run's options.
func TestHelp(t *testing.T) {
	t.Parallel()
	code, help, errOut := leaderrun(t, nil, "help", "all")
	if code != 0 || errOut != "" {
		t.Fatalf("help all: exit %d, stderr %q", code, errOut)
	}
	for i, line := range strings.Split(help, "\n") {
		if len(line) > 80 {
			t.Errorf("help all line %d is %d columns wide: %q", i+1, len(line), line)
		}
	}

	// Groups in reading order; --key and --backend lead.
	var titles []string
	for _, line := range strings.Split(help, "\n") {
		if regexp.MustCompile(`^[A-Za-z][A-Za-z ]*:$`).MatchString(line) {
			titles = append(titles, strings.TrimSuffix(line, ":"))
		}
	}
	// Every group but the query options, which only status and check have.
	want := slices.DeleteFunc(categoryOrder(), func(c string) bool { return c == catQuery })
	if !slices.Equal(titles, want) {
		t.Errorf("groups %q, want %q", titles, want)
	}
	if k, b, ttl := strings.Index(help, "--key KEY"), strings.Index(help, "--backend"), strings.Index(help, "--ttl"); k < 0 || k > b || b > ttl {
		t.Errorf("--key (%d) and --backend (%d) must come before --ttl (%d)", k, b, ttl)
	}

	entries := flagEntries(help)
	for _, f := range newApp(nil).Flags {
		d := docFlag(f)
		if slices.Contains(f.Names(), "generate-bash-completion") {
			continue
		}
		entry, ok := entries[d.Name]
		if !ok {
			t.Errorf("--help does not show %s", d.Name)
			continue
		}
		if !slices.Contains(categoryOrder(), d.Category) {
			t.Errorf("%s has no known group (Category %q); use one of %q", d.Name, d.Category, categoryOrder())
		}
		if n := strings.Count(entry, "(default"); n > 1 {
			t.Errorf("%s shows its default %d times:\n%s", d.Name, n, entry)
		}
		if len(d.Env) > 0 && d.Env[0] != ruleEnv(d.Name) && !strings.Contains(entry, "$"+d.Env[0]) {
			t.Errorf("%s reads $%s, which neither the rule nor its entry says:\n%s", d.Name, d.Env[0], entry)
		}
	}
	for _, e := range []string{"--ttl", "--kill-grace", "--backend", "--stop-signal"} {
		if !strings.Contains(strings.Join(strings.Fields(entries[e]), " "), "(default ") {
			t.Errorf("%s shows no default:\n%s", e, entries[e])
		}
	}
	if !strings.Contains(entries["--ttl"], "local backend") {
		t.Errorf("--ttl does not say what it means on the local backend:\n%s", entries["--ttl"])
	}

	// It ends with the environment rule, the exit codes, the key rule and
	// what a word without -- before it is.
	tail := help[strings.LastIndex(help, "Environment:"):]
	for _, w := range []string{"LEADERRUN_<OPTION>", "123", "124", "125", "126", "127", "128+N", "KEY:", "..", "COMMAND: put -- before it"} {
		if !strings.Contains(tail, w) {
			t.Errorf("the end of --help lacks %q:\n%s", w, tail)
		}
	}
	if !strings.HasPrefix(help, "Usage: leaderrun [options] --key KEY -- COMMAND") {
		t.Errorf("--help starts with %q", help[:60])
	}

	// `help` is --help; `help status` is `status --help`.
	_, short, _ := leaderrun(t, nil, "--help")
	if code, out, _ := leaderrun(t, nil, "help"); code != 0 || out != short {
		t.Errorf("`leaderrun help`: exit %d, differs from --help:\n%s", code, out)
	}
	for _, cmd := range []string{"status", "check"} {
		code1, viaHelp, _ := leaderrun(t, nil, "help", cmd)
		code2, viaFlag, _ := leaderrun(t, nil, cmd, "--help")
		if code1 != 0 || code2 != 0 || viaHelp != viaFlag || !strings.HasPrefix(viaHelp, "Usage: leaderrun "+cmd+" [KEY]") {
			t.Errorf("help %s (exit %d) and %s --help (exit %d) differ or lack the usage line:\n%s\n---\n%s", cmd, code1, cmd, code2, viaHelp, viaFlag)
		}
		entries := flagEntries(viaHelp)
		if _, ok := entries["--id"]; ok {
			t.Errorf("%s --help lists --id, which means nothing there", cmd)
		}
		if !strings.Contains(entries["--timeout"], "(default 10s)") {
			t.Errorf("%s --help: --timeout entry %q", cmd, entries["--timeout"])
		}
		for i, line := range strings.Split(viaHelp, "\n") {
			if len(line) > 80 {
				t.Errorf("%s --help line %d is %d columns wide", cmd, i+1, len(line))
			}
		}
	}
	if code, _, errOut := leaderrun(t, nil, "help", "nope"); code != 125 || !strings.Contains(errOut, `"nope"`) {
		t.Errorf("help nope: exit %d, %q", code, errOut)
	}
}

func TestBareLeaderrunIsShortUsageOnStderr(t *testing.T) {
	t.Parallel()
	code, out, errOut := leaderrun(t, nil)
	if code != 125 || out != "" {
		t.Fatalf("exit %d, stdout %q; want 125 and nothing on stdout", code, out)
	}
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	if len(lines) > 6 || !strings.Contains(lines[0], "--key") || !strings.Contains(lines[0], "COMMAND") {
		t.Errorf("want a short usage naming what is missing, got:\n%s", errOut)
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	_, byCmd, _ := leaderrun(t, nil, "version")
	_, byFlag, _ := leaderrun(t, nil, "--version")
	re := regexp.MustCompile(`^leaderrun \S+ \(commit \S+, go1\.[0-9.]+\S*, [a-z0-9]+/[a-z0-9]+\)\n$`)
	if !re.MatchString(byCmd) || byCmd != byFlag {
		t.Errorf("version %q and --version %q: want one format matching %s", byCmd, byFlag, re)
	}
}

func TestErrorLines(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	noInterp := filepath.Join(dir, "job.py")
	if err := os.WriteFile(noInterp, []byte("#!/usr/bin/no-such-python3\nprint(1)\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	local := []string{"--backend", "local", "--lock-dir", dir, "--key", "k"}
	cases := []struct {
		name string
		env  []string
		args []string
		code int
		line string // the whole stderr, without "leaderrun: "
	}{
		{"duration without unit", nil, append(local, "--ttl", "5", "--", "true"), 125,
			"--ttl 5: a duration needs a unit, as in 5s or 5m"},
		{"not a duration", nil, append(local, "--kill-grace", "soon", "--", "true"), 125,
			`--kill-grace "soon": not a duration; write it as 5s, 2m or 1h30m`},
		{"duration from the environment", []string{"LEADERRUN_TTL=5"}, append(local, "--", "true"), 125,
			"LEADERRUN_TTL=5 (--ttl): a duration needs a unit, as in 5s or 5m"},
		{"unknown option", nil, []string{"--nope"}, 125, "unknown option --nope (leaderrun help all lists them)"},
		{"missing value", nil, []string{"--key"}, 125, "--key needs a value"},
		{"timing rule rounded", nil, append(local, "--ttl", "5s", "--", "true"), 125,
			"--renew-interval (1.667s) + --kill-grace (5s) + --safety-margin (1s) = 7.667s must be less than --ttl (5s)"},
		{"ttl past a day", nil, append(local, "--ttl", "1000000h", "--", "true"), 125, "--ttl must be at most 24h, got 1000000h"},
		{"stop signal STOP", nil, append(local, "--stop-signal", "STOP", "--", "true"), 125,
			"--stop-signal must end the job, and SIGSTOP only stops or continues it"},
		{"stop signal KILL", nil, append(local, "--stop-signal", "9", "--", "true"), 125,
			"--stop-signal must not be KILL: SIGKILL follows the stop signal after --kill-grace; shorten that instead"},
		{"log level", nil, append(local, "--log-level", "loud", "--", "true"), 125,
			`--log-level must be trace, debug, info, warn, error or off, got "loud"`},
		{"directory as command", nil, append(local, "--", dir), 126, dir + ": is a directory"},
		{"missing interpreter", nil, append(local, "--", noInterp), 127,
			noInterp + ": interpreter /usr/bin/no-such-python3 (from its #! line) not found"},
		{"status extra argument", nil, append([]string{"status"}, "a", "b"), 125,
			`status takes at most one KEY argument, got 2: ["a" "b"]`},
		{"status key twice", nil, []string{"status", "--key", "a", "b"}, 125,
			`the KEY argument "b" and --key "a" differ; give one`},
		{"check epoch", nil, []string{"check", "--epoch", "x", "k"}, 125, `--epoch "x": not a whole number`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := leaderrun(t, c.env, c.args...)
			if code != c.code || errOut != "leaderrun: "+c.line+"\n" {
				t.Errorf("exit %d, stderr:\n%s\nwant exit %d, stderr:\nleaderrun: %s\n(stdout %q)", code, errOut, c.code, c.line, out)
			}
		})
	}
}

func TestStopSignalsThatDoNotEndTheJob(t *testing.T) {
	for _, sig := range []string{"STOP", "SIGTSTP", "ttin", "TTOU", "CONT", "KILL"} {
		t.Run(sig, func(t *testing.T) {
			if _, err := stopSignal(sig); err == nil || !strings.HasPrefix(err.Error(), "--stop-signal must") {
				t.Errorf("--stop-signal %s: %v, want a refusal", sig, err)
			}
		})
	}
	for _, sig := range []string{"TERM", "SIGINT", "1", "USR1"} {
		if _, err := stopSignal(sig); err != nil {
			t.Errorf("--stop-signal %s refused: %v", sig, err)
		}
	}
}

func TestKeyAsArgument(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	code, out, errOut := leaderrun(t, nil, "status", "--backend", "local", "--lock-dir", dir, "billing")
	if code != exitcode.StatusNeverUsed || !regexp.MustCompile(`(?m)^key\s+billing$`).MatchString(out) {
		t.Fatalf("status KEY: exit %d\n%s%s", code, out, errOut)
	}
	code, _, errOut = leaderrun(t, nil, "check", "--backend", "local", "--lock-dir", dir, "--epoch", "3", "billing")
	if code != 1 || !strings.Contains(errOut, "no leader") {
		t.Fatalf("check KEY: exit %d, %q", code, errOut)
	}
}

func TestEnvFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "billing.env")
	text := "# settings\n\nLEADERRUN_BACKEND=local\n; also a comment\nLEADERRUN_LOCK_DIR=\"" + dir + "\"\nLEADERRUN_PREFIX='jobs'\n"
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := leaderrun(t, []string{"LEADERRUN_BACKEND=etcd"}, "status", "--env-file", file, "--json", "billing")
	if code != exitcode.StatusNeverUsed || !strings.Contains(out, `"backend": "local"`) {
		t.Fatalf("status --env-file: exit %d\n%s%s", code, out, errOut)
	}
	code, _, errOut = leaderrun(t, nil, "status", "--env-file", filepath.Join(dir, "missing.env"), "billing")
	if code != 125 || !strings.Contains(errOut, "missing.env does not exist") {
		t.Errorf("missing env file: exit %d, %q", code, errOut)
	}
	bad := filepath.Join(dir, "bad.env")
	if err := os.WriteFile(bad, []byte("OK=1\nnot a setting\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := leaderrun(t, nil, "status", "--env-file", bad, "k"); code != 125 || !strings.Contains(errOut, "bad.env:2: not a VAR=value line") {
		t.Errorf("bad env file: exit %d, %q", code, errOut)
	}
	// A shell's export is no systemd EnvironmentFile= line: said so, with
	// the file and line.
	exp := filepath.Join(dir, "export.env")
	if err := os.WriteFile(exp, []byte("# settings\nexport LEADERRUN_BACKEND=local\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := leaderrun(t, nil, "status", "--env-file", exp, "k"); code != 125 || !strings.Contains(errOut, "export.env:2:") || !strings.Contains(errOut, "export") || !strings.Contains(errOut, "EnvironmentFile=") {
		t.Errorf("export in an env file: exit %d, %q; want 125 naming export.env:2, export and EnvironmentFile=", code, errOut)
	}
	// A FIFO where the settings should be (another user's, in a shared
	// directory) is refused at once: opening it to read would wait for a
	// writer for good.
	fifo := filepath.Join(dir, "fifo.env")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	type result struct {
		code   int
		errOut string
	}
	done := make(chan result, 1)
	go func() {
		code, _, errOut := leaderrun(t, nil, "status", "--env-file", fifo, "k")
		done <- result{code, errOut}
	}()
	select {
	case r := <-done:
		if r.code != 125 || !strings.Contains(r.errOut, "not a regular file") {
			t.Errorf("FIFO env file: exit %d, %q", r.code, r.errOut)
		}
	case <-time.After(20 * time.Second):
		t.Errorf("FIFO env file: leaderrun still waits 20s later")
	}
}

// --unit NAME reads the same two files as leaderrun@NAME.service, the
// shared one first, and names the key.
func TestUnitSettings(t *testing.T) {
	dir := t.TempDir()
	old := configDir
	configDir = dir
	t.Cleanup(func() { configDir = old })
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("leaderrun.env", "LEADERRUN_BACKEND=etcd\nETCDCTL_ENDPOINTS=10.0.0.1:2379\n")
	write("billing.env", "LEADERRUN_BACKEND=local\nLEADERRUN_COMMAND=/bin/true\n")
	for _, v := range []string{"LEADERRUN_BACKEND", "ETCDCTL_ENDPOINTS", "LEADERRUN_COMMAND"} {
		t.Setenv(v, "from-the-shell")
	}
	if err := loadEnvFiles([]string{"leaderrun", "status", "--unit", "billing"}); err != nil {
		t.Fatal(err)
	}
	for v, want := range map[string]string{"LEADERRUN_BACKEND": "local", "ETCDCTL_ENDPOINTS": "10.0.0.1:2379", "LEADERRUN_COMMAND": "/bin/true"} {
		if got := os.Getenv(v); got != want {
			t.Errorf("%s = %q, want %q", v, got, want)
		}
	}
	if err := loadEnvFiles([]string{"leaderrun", "status", "--unit=nope"}); err == nil || !strings.Contains(err.Error(), "nope.env does not exist") {
		t.Errorf("--unit with no env file: %v", err)
	}
	// After "--" everything belongs to the command.
	if err := loadEnvFiles([]string{"leaderrun", "--key", "k", "--", "job", "--unit", "nope"}); err != nil {
		t.Errorf("--unit after --: %v", err)
	}
}

// TestUnitSettingsOfRootSaySo: `leaderrun status --unit billing` typed
// by a user who may not read the unit's settings (root's, mode 600) says
// that they are root's and what to do, not only "permission denied".
func TestUnitSettingsOfRootSaySo(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run leaderrun as another user")
	}
	// This test binary, where another user may run it.
	bin := filepath.Join(t.TempDir(), "leaderrun")
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	for d := filepath.Dir(bin); d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	conf := filepath.Join(filepath.Dir(bin), "conf")
	if err := os.Mkdir(conf, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"leaderrun.env", "billing.env"} {
		if err := os.WriteFile(filepath.Join(conf, f), []byte("LEADERRUN_BACKEND=local\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, "status", "--unit", "billing")
	cmd.Env = []string{"LEADERRUN_TEST_RUN_MAIN=1", "LEADERRUN_TEST_CONFIG_DIR=" + conf, "PATH=" + os.Getenv("PATH"), "HOME=" + filepath.Dir(bin)}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: testsupport.Nobody, Gid: testsupport.Nobody}}
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 125 {
		t.Fatalf("status --unit as another user: %v, want exit 125\n%s", err, errOut.String())
	}
	for _, want := range []string{"leaderrun.env", "root", "sudo", "--backend"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("status --unit with settings it may not read does not say %q:\n%s", want, errOut.String())
		}
	}
	if lines := strings.Split(strings.TrimSpace(errOut.String()), "\n"); len(lines) != 1 {
		t.Errorf("want one line, got %d:\n%s", len(lines), errOut.String())
	}
}

// runApp takes its command line from its argument, never from os.Args:
// "--" before a word that names a subcommand still makes it the command
// to run, judged from the arguments given (here: a program named status
// that does not exist, 127), whatever this test binary's own os.Args are.
func TestRunAppUsesItsArguments(t *testing.T) {
	dir := t.TempDir()
	args := []string{"leaderrun", "--backend", "local", "--lock-dir", dir, "--key", "k", "--log-level", "off",
		"--", "status", "--json"}
	t.Setenv("PATH", dir) // no program named status anywhere
	if code := runApp(args); code != 127 {
		t.Errorf("runApp(%q) = %d, want 127 (the command status not found)", args, code)
	}
}
