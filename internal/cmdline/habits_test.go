//go:build linux

package cmdline

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// What an operator trips on in daily use: command lists that leave
// commands out, a period written as cron users write it, completion of
// help's topics, a command's help drowned in backend options, lines wider
// than a terminal.

// visibleCommands are the commands an operator may type: every command
// the app shows, and help.
func visibleCommands() []string {
	var names []string
	for _, cmd := range newApp(nil).Commands {
		if !cmd.Hidden {
			names = append(names, cmd.Name)
		}
	}
	return append(names, "help")
}

// namesCommand says whether text names cmd as a word of a command list:
// "leaderrun pause", "status|pause|resume", "[all|pause]".
func namesCommand(text, cmd string) bool {
	return regexp.MustCompile(`(^|[\s|\[,])` + regexp.QuoteMeta(cmd) + `($|[\s|\],;.])`).MatchString(text)
}

// TestUnknownCommandListsEveryCommand: a word that is no command lists
// them all, and a typo of any of them gets that one suggested.
func TestUnknownCommandListsEveryCommand(t *testing.T) {
	t.Parallel()
	code, _, errOut := leaderrun(t, nil, "nightly-report")
	if code != 125 {
		t.Fatalf("exit %d, want 125: %s", code, errOut)
	}
	for _, cmd := range visibleCommands() {
		if !namesCommand(errOut, cmd) {
			t.Errorf("the unknown command's error does not list %q:\n%s", cmd, errOut)
		}
	}
	dir := t.TempDir()
	for typo, want := range map[string]string{
		"stepdown": "step-down", "step-dwn": "step-down", "pasue": "pause", "resme": "resume",
		"hisotry": "history", "verison": "version",
	} {
		for _, args := range [][]string{{typo, "k"}, {"--backend", "local", "--lock-dir", dir, "--key", "k", typo}} {
			code, _, errOut := leaderrun(t, nil, args...)
			line := `unknown command "` + typo + `"; did you mean "` + want + `"?`
			if code != 125 || !strings.HasPrefix(errOut, "leaderrun: "+line) {
				t.Errorf("%q: exit %d, %q; want 125 and %s", args, code, errOut, line)
			}
		}
	}
}

// readmeCommandList is the README's list of the commands: the indented
// block that starts with the run's synopsis.
func readmeCommandList(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var block []string
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "    leaderrun [options] --key KEY -- COMMAND"):
			block = []string{line}
		case len(block) > 0 && strings.HasPrefix(line, "    leaderrun "):
			block = append(block, line)
		case len(block) > 0:
			return strings.Join(block, "\n")
		}
	}
	t.Fatal("README.md has no list of the commands")
	return ""
}

// TestEveryListNamesEveryCommand: the man page's SYNOPSIS, the README's
// list, the short usage of a bare leaderrun and --help's usage each name
// every command.
func TestEveryListNamesEveryCommand(t *testing.T) {
	t.Parallel()
	page, err := manPage(newApp(nil))
	if err != nil {
		t.Fatal(err)
	}
	synopsis := page[strings.Index(page, ".SH SYNOPSIS"):strings.Index(page, ".SH DESCRIPTION")]
	synopsis = regexp.MustCompile(`\\f[BIR]`).ReplaceAllString(synopsis, "")
	synopsis = strings.ReplaceAll(synopsis, `\-`, "-")
	_, _, bare := leaderrun(t, nil)
	_, help, _ := leaderrun(t, nil, "--help")
	_, all, _ := leaderrun(t, nil, "help", "all")
	lists := map[string]string{
		"the man page's SYNOPSIS":  synopsis,
		"README.md's list":         readmeCommandList(t),
		"a bare leaderrun's usage": bare,
		"--help's usage":           help[:strings.Index(help, "\n\n")],
		"help all's usage":         all[:strings.Index(all, "\n\n")],
	}
	for what, text := range lists {
		for _, cmd := range visibleCommands() {
			if !namesCommand(text, cmd) {
				t.Errorf("%s does not name %q:\n%s", what, cmd, text)
			}
		}
	}
}

// TestOncePerDaysAndWeeks: --once-per takes d and w as cron users write
// them; 1d is the slot 24h is; anything else is refused with the format.
func TestOncePerDaysAndWeeks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ran := filepath.Join(dir, "ran")
	run := func(env []string, key, period string) (int, string) {
		args := []string{"--backend", "local", "--lock-dir", dir, "--key", key, "-q"}
		if period != "" {
			args = append(args, "--once-per", period)
		}
		code, _, errOut := leaderrun(t, env, append(args, "--", "sh", "-c", "echo "+key+" >> "+ran)...)
		return code, errOut
	}
	for _, p := range []string{"1d", "2w", "1d12h", "1w2d", "36h"} {
		if code, errOut := run(nil, "k-"+p, p); code != 0 {
			t.Errorf("--once-per %s: exit %d, %q; want the job run", p, code, errOut)
		}
	}
	if code, errOut := run([]string{"LEADERRUN_ONCE_PER=1d"}, "k-env", ""); code != 0 {
		t.Errorf("LEADERRUN_ONCE_PER=1d: exit %d, %q; want the job run", code, errOut)
	}
	// The day's slot of 1d is that of 24h: it ran, so it does not again.
	if code, errOut := run(nil, "k-1d", "24h"); code != 0 {
		t.Errorf("--once-per 24h after 1d: exit %d, %q", code, errOut)
	}
	b, _ := os.ReadFile(ran)
	if got := strings.Count(string(b), "k-1d\n"); got != 1 {
		t.Errorf("the slot of --once-per 1d, then 24h, ran %d times, want once:\n%s", got, b)
	}
	for _, bad := range []string{"1x", "d", "1.5.d", "-1d", "1d 2h"} {
		code, errOut := run(nil, "k-bad", bad)
		if code != 125 || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "--once-per") ||
			!strings.Contains(errOut, "1d12h") || !strings.Contains(errOut, "w") {
			t.Errorf("--once-per %q: exit %d, %q; want 125 and one line saying the format (as 1d12h)", bad, code, errOut)
		}
	}
	if strings.Contains(string(b), "k-bad") {
		t.Error("a refused --once-per ran the job")
	}
}

// TestHelpCompletionOffersTopics: `leaderrun help <TAB>` offers help's
// topics: all, the commands and the backends, never "h".
func TestHelpCompletionOffersTopics(t *testing.T) {
	t.Parallel()
	code, out, errOut := leaderrun(t, nil, "help", "--generate-bash-completion")
	if code != 0 {
		t.Fatalf("exit %d, %q", code, errOut)
	}
	words := strings.Fields(out)
	want := slices.Concat([]string{"all"}, slices.DeleteFunc(visibleCommands(), func(c string) bool { return c == "help" }), backendNames())
	for _, w := range want {
		if !slices.Contains(words, w) {
			t.Errorf("help's completion lacks %q: %q", w, words)
		}
	}
	for _, w := range []string{"h", "help"} {
		if slices.Contains(words, w) {
			t.Errorf("help's completion offers %q: %q", w, words)
		}
	}
}

// TestCommandHelpIsItsOwn: `help CMD` shows the command's own usage and
// options and points to where the backend options are, rather than
// listing every backend's.
func TestCommandHelpIsItsOwn(t *testing.T) {
	t.Parallel()
	backendOpts := map[string]bool{}
	for _, b := range backends {
		for _, f := range b.Flags() {
			backendOpts["--"+f.Names()[0]] = true
		}
	}
	for _, cmd := range visibleCommands() {
		if cmd == "help" {
			continue
		}
		code, help, errOut := leaderrun(t, nil, "help", cmd)
		if code != 0 {
			t.Errorf("help %s: exit %d, %q", cmd, code, errOut)
			continue
		}
		if !strings.HasPrefix(help, "Usage: leaderrun "+cmd) {
			t.Errorf("help %s does not start with its usage:\n%.200s", cmd, help)
		}
		for name := range flagEntries(help) {
			if backendOpts[name] {
				t.Errorf("help %s lists the backend option %s", cmd, name)
			}
		}
		if n := helpRows(help); n > 60 {
			t.Errorf("help %s takes %d rows, want at most 60:\n%s", cmd, n, help)
		}
		if cmd == "version" {
			continue
		}
		flat := strings.Join(strings.Fields(help), " ")
		for _, w := range []string{"leaderrun help all", "leaderrun help BACKEND"} {
			if !strings.Contains(flat, w) {
				t.Errorf("help %s does not point to %q for the backend options:\n%s", cmd, w, help)
			}
		}
	}
	_, help, _ := leaderrun(t, nil, "help", "pause")
	for _, name := range []string{"--reason", "--timeout", "--key", "--backend"} {
		if _, ok := flagEntries(help)[name]; !ok {
			t.Errorf("help pause lacks its option %s:\n%s", name, help)
		}
	}
}

// TestHelpFitsEightyColumns: every line of --help, help all, and the help
// of each command and backend fits an 80-column terminal.
func TestHelpFitsEightyColumns(t *testing.T) {
	t.Parallel()
	asks := [][]string{{"--help"}, {"help"}, {"help", "all"}}
	for _, cmd := range visibleCommands() {
		asks = append(asks, []string{"help", cmd})
	}
	for _, b := range backendNames() {
		asks = append(asks, []string{"help", b})
	}
	for _, ask := range asks {
		code, out, errOut := leaderrun(t, nil, ask...)
		if code != 0 {
			t.Errorf("%q: exit %d, %q", ask, code, errOut)
		}
		for i, line := range strings.Split(out, "\n") {
			if n := len([]rune(line)); n > 80 {
				t.Errorf("%q line %d is %d columns: %q", ask, i+1, n, line)
			}
		}
	}
}

// TestEnvFileWithASecretReadableByOthers: a settings file that sets a
// token or password and that other users may read is used, with a warning
// naming the file, its mode and the variable (ssh refuses such a key; a
// unit's settings file must not stop working on an upgrade).
func TestEnvFileWithASecretReadableByOthers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	lockDir := filepath.Join(dir, "locks")
	for name, tc := range map[string]struct {
		content string
		mode    os.FileMode
		warn    string
	}{
		"token 0644":    {"CONSUL_HTTP_TOKEN=abc\n", 0o644, "CONSUL_HTTP_TOKEN"},
		"dsn 0604":      {"LEADERRUN_POSTGRES_DSN=postgres://u:pw@db/x\n", 0o604, "LEADERRUN_POSTGRES_DSN"},
		"token 0600":    {"CONSUL_HTTP_TOKEN=abc\n", 0o600, ""},
		"no secret 644": {"LEADERRUN_TTL=10s\n", 0o644, ""},
	} {
		f := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".env")
		if err := os.WriteFile(f, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(f, tc.mode); err != nil {
			t.Fatal(err)
		}
		code, _, errOut := leaderrun(t, nil, "--env-file", f, "--backend", "local", "--lock-dir", lockDir, "--key", "k", "-q", "--", "true")
		if code != 0 {
			t.Errorf("%s: exit %d: %s", name, code, errOut)
		}
		warned := strings.Contains(errOut, f) && strings.Contains(errOut, "other users can read it")
		if tc.warn == "" && warned {
			t.Errorf("%s: warned: %s", name, errOut)
		}
		if tc.warn != "" && (!warned || !strings.Contains(errOut, tc.warn) || strings.Contains(errOut, "abc") || strings.Contains(errOut, "pw@")) {
			t.Errorf("%s: want one warning naming %s, its mode and %s (and no secret): %q", name, f, tc.warn, errOut)
		}
	}
}
