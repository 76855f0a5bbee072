//go:build linux

package cmdline

import (
	"regexp"
	"strings"
	"testing"

	"github.com/leaderrun/leaderrun/internal/exitcode"
)

// Every command takes its options before its name, between its name and
// its KEY, and after its KEY. Given before the command, the backend's
// options used to be read into the run's flag set and dropped: `leaderrun
// --backend local --lock-dir D status billing` asked Consul, the default,
// and `pause` or `step-down` would have paused the key on another system.
func TestOptionsAnywhere(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	local := []string{"--backend", "local", "--lock-dir", dir}
	neverUsed := regexp.MustCompile(`(?m)^key\s+billing$`)
	for _, args := range [][]string{
		append(append([]string{}, local...), "status", "billing"),
		append(append([]string{"--backend=local"}, local[2:]...), "status", "--json=false", "billing"),
		append(append([]string{"status", "billing"}, local...), "--json=false"),
		append(append([]string{"--key", "billing"}, local...), "status"),
	} {
		code, out, errOut := leaderrun(t, nil, args...)
		if code != exitcode.StatusNeverUsed || !neverUsed.MatchString(out) {
			t.Errorf("leaderrun %s: exit %d, want %d and the local key billing\n%s%s", strings.Join(args, " "), code, exitcode.StatusNeverUsed, out, errOut)
		}
	}

	// pause and resume, options after the KEY and before the command.
	code, out, errOut := leaderrun(t, nil, append([]string{"pause", "billing", "--reason", "schema migration"}, local...)...)
	if code != 0 {
		t.Fatalf("pause billing --reason ... --backend local: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = leaderrun(t, nil, append(append([]string{}, local...), "status", "billing")...)
	if !strings.Contains(out, "schema migration") {
		t.Errorf("status after pause (exit %d) does not show the pause's reason:\n%s", code, out)
	}
	code, out, errOut = leaderrun(t, nil, append(append([]string{}, local...), "resume", "billing", "--timeout", "5s")...)
	if code != 0 {
		t.Fatalf("--backend local ... resume billing --timeout 5s: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = leaderrun(t, nil, append(append([]string{}, local...), "status", "billing")...)
	if strings.Contains(out, "schema migration") {
		t.Errorf("status after resume (exit %d) still shows the pause:\n%s", code, out)
	}

	// An option before a command that the command does not take: refused
	// with the rule, never dropped; a "--" still ends the options.
	code, _, errOut = leaderrun(t, nil, append(append([]string{}, local...), "--ttl", "20s", "status", "billing")...)
	if code != 125 || errOut != "leaderrun: status takes no --ttl: the options before it are its own (leaderrun help status lists them)\n" {
		t.Errorf("leaderrun ... --ttl 20s status billing: exit %d, stderr %q; want 125 and the rule", code, errOut)
	}
	code, _, errOut = leaderrun(t, nil, "--restart", "always", "version")
	if code != 125 || errOut != "leaderrun: version takes no --restart: the options before it are its own (leaderrun help version lists them)\n" {
		t.Errorf("leaderrun --restart always version: exit %d, stderr %q; want 125 and the rule", code, errOut)
	}
	code, _, errOut = leaderrun(t, nil, append(append([]string{}, local...), "--key", "k", "--", "status")...)
	if code != 127 || !strings.Contains(errOut, "status") {
		t.Errorf("leaderrun ... -- status: exit %d, %q; want the program status run (127, not found)", code, errOut)
	}
}
