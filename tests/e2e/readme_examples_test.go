package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The README's examples are what a new operator types first: every one of
// its command lines that needs no server runs here, as written, on the
// local backend (LEADERRUN_BACKEND=local in the environment, as a host's
// settings would give it), and must exit 0.

// readmeBlock is one code block of the README: its first line's number and
// its lines, the prompt ("$ ") taken off.
type readmeBlock struct {
	line  int
	lines []string
}

// readmeBlocks collects the README's fenced and indented code blocks.
func readmeBlocks(t *testing.T) []readmeBlock {
	t.Helper()
	b, err := os.ReadFile(repoFile(t, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []readmeBlock
	var cur *readmeBlock
	fenced, prevBlank := false, true
	for i, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "```"):
			if fenced {
				blocks, cur = append(blocks, *cur), nil
			} else {
				cur = &readmeBlock{line: i + 2}
			}
			fenced = !fenced
		case fenced:
			cur.lines = append(cur.lines, line)
		case strings.HasPrefix(line, "    ") && (cur != nil || prevBlank):
			if cur == nil {
				cur = &readmeBlock{line: i + 1}
			}
			cur.lines = append(cur.lines, strings.TrimPrefix(strings.TrimPrefix(line, "    "), "$ "))
		case cur != nil:
			blocks, cur = append(blocks, *cur), nil
		}
		prevBlank = strings.TrimSpace(line) == ""
	}
	return blocks
}

var (
	// leaderrunCommand finds a leaderrun command in a line: the line
	// itself, after "&&", or after a crontab line's five time fields.
	leaderrunCommand = regexp.MustCompile(`(?:^|&& |^(?:\S+\s+){5})((?:bin/)?leaderrun(?:\s.*)?)$`)
	trailingComment  = regexp.MustCompile(`\s{2,}#.*$`)
	otherBackend     = regexp.MustCompile(`--backend[ =](consul|etcd|zookeeper|kubernetes|postgres|dynamodb)`)
)

// readmeCommand is one leaderrun command line found in a code block.
type readmeCommand struct {
	line int
	cmd  string
}

// control reports whether the command acts on a running leader.
func (c readmeCommand) control() bool {
	f := strings.Fields(c.cmd)
	return len(f) > 1 && (f[1] == "step-down" || f[1] == "pause" || f[1] == "resume")
}

func TestReadmeExamplesRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(binary, filepath.Join(bin, "leaderrun")); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"),
		"LEADERRUN_BACKEND=local", "LEADERRUN_LOCK_DIR="+filepath.Join(dir, "locks"))
	run := func(line int, command string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "sh", "-c", command)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("README.md:%d: %s: %v\n%s", line, command, err, out)
		} else {
			t.Logf("README.md:%d: %s: ok", line, command)
		}
	}

	var later []readmeCommand
	ran, needServer, synopsis := 0, 0, 0
	for _, b := range readmeBlocks(t) {
		if len(b.lines) > 0 && strings.HasPrefix(b.lines[0], "#!/bin/sh") {
			runScriptBlock(t, dir, b, run)
			ran++
			continue
		}
		for i, l := range b.lines {
			l = trailingComment.ReplaceAllString(strings.TrimSpace(l), "")
			m := leaderrunCommand.FindStringSubmatch(l)
			switch {
			case m == nil || strings.HasPrefix(l, "#"):
			case strings.Contains(m[1], " ["):
				synopsis++
			case otherBackend.MatchString(m[1]):
				needServer++
			case (readmeCommand{cmd: m[1]}).control():
				later = append(later, readmeCommand{b.line + i, m[1]})
			default:
				run(b.line+i, m[1])
				ran++
			}
		}
	}
	// The control commands act on the key as the README's service runs
	// it: a leader, and the candidate db2:4211 one example hands over to.
	if len(later) > 0 {
		leader := start(t, "leader", env[len(env)-2:], "--key", "billing", "--", "sleep", "300")
		waitFor(t, 10*time.Second, "the leader's child", func() bool { return strings.Contains(leader.Output(), "child started") })
		start(t, "db2:4211", env[len(env)-2:], "--key", "billing", "--id", "db2:4211", "--", "sleep", "300")
		time.Sleep(500 * time.Millisecond)
		for _, c := range later {
			run(c.line, c.cmd)
			ran++
		}
	}
	t.Logf("README examples: %d run, %d need a server, %d synopsis lines", ran, needServer, synopsis)
	if ran < 6 {
		t.Fatalf("only %d README examples ran: is the pattern still right?", ran)
	}
}

// runScriptBlock runs a block that is a shell script ("#!/bin/sh") as its
// "# run as:" line says, with a stand-in that succeeds for each command the
// script calls that this host lacks.
func runScriptBlock(t *testing.T, dir string, b readmeBlock, run func(int, string)) {
	t.Helper()
	var runAs string
	stubs := filepath.Join(dir, "bin")
	for _, l := range b.lines {
		if as, ok := strings.CutPrefix(l, "# run as: "); ok {
			runAs = as
			continue
		}
		f := strings.Fields(l)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") || f[0] == "set" || f[0] == "leaderrun" {
			continue
		}
		if _, err := exec.LookPath(f[0]); err != nil {
			if err := os.WriteFile(filepath.Join(stubs, f[0]), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	f := strings.Fields(runAs)
	if len(f) == 0 {
		t.Fatalf("README.md:%d: a script without a \"# run as:\" line", b.line)
	}
	script := filepath.Join(dir, filepath.Base(f[len(f)-1]))
	if err := os.WriteFile(script, []byte(strings.Join(b.lines, "\n")+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	run(b.line, strings.Join(append(f[:len(f)-1], script), " "))
}
