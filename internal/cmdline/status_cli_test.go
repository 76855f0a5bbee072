package cmdline

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/leaderrun/leaderrun/internal/exitcode"
)

// A key never used (here: the right key with the wrong --lock-dir, and a
// typo) is not "no leader": status exits StatusNeverUsed and names where
// it looked, in the table, the JSON and on stderr; check stays exit 1 and
// says so. The key, once run and finished, is "no leader" with exit 0.
func TestStatusNeverUsed(t *testing.T) {
	t.Parallel()
	dir, wrong := t.TempDir(), t.TempDir()
	local := func(lockDir string, args ...string) []string {
		return append([]string{args[0], "--backend", "local", "--lock-dir", lockDir}, args[1:]...)
	}
	// One run of the key: acquired, the job ran, released.
	if code, _, errOut := leaderrun(t, nil, "--backend", "local", "--lock-dir", dir, "--log-level", "off", "--key", "billing", "--", "true"); code != 0 {
		t.Fatalf("run: exit %d\n%s", code, errOut)
	}

	code, out, errOut := leaderrun(t, nil, local(dir, "status", "billing")...)
	if code != 0 || !regexp.MustCompile(`(?m)^leader\s+no leader$`).MatchString(out) || errOut != "" {
		t.Errorf("status of a used key: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = leaderrun(t, nil, local(dir, "status", "--json", "billing")...)
	if code != 0 || strings.Contains(out, "never_used") || strings.Contains(out, "looked_at") {
		t.Errorf("status --json of a used key: exit %d\n%s", code, out)
	}

	for _, c := range []struct{ name, lockDir, key string }{
		{"wrong --lock-dir", wrong, "billing"},
		{"typo", dir, "biling"},
	} {
		t.Run(c.name, func(t *testing.T) {
			where := c.lockDir + " (local lock dir)"
			line := "leaderrun: key \"" + c.key + "\" was never used at " + where + " — check the key and --lock-dir\n"
			code, out, errOut := leaderrun(t, nil, local(c.lockDir, "status", c.key)...)
			if code != exitcode.StatusNeverUsed || errOut != line ||
				!regexp.MustCompile(`(?m)^leader\s+no leader, key never used$`).MatchString(out) ||
				!regexp.MustCompile(`(?m)^looked at\s+`+regexp.QuoteMeta(where)+`$`).MatchString(out) {
				t.Errorf("status: exit %d, stdout:\n%sstderr: %q\nwant exit 3 and stderr %q", code, out, errOut, line)
			}
			code, out, errOut = leaderrun(t, nil, local(c.lockDir, "status", "--json", c.key)...)
			var doc struct {
				Leader    *struct{} `json:"leader"`
				NeverUsed bool      `json:"never_used"`
				LookedAt  string    `json:"looked_at"`
			}
			if err := json.Unmarshal([]byte(out), &doc); err != nil || code != 3 || doc.Leader != nil || !doc.NeverUsed || doc.LookedAt != where || errOut != line {
				t.Errorf("status --json: exit %d, %v, %+v\n%s%s", code, err, doc, out, errOut)
			}
			code, _, errOut = leaderrun(t, nil, local(c.lockDir, "check", "--epoch", "1", c.key)...)
			if code != exitcode.CheckNotLeader || !strings.Contains(errOut, "never used at "+where) {
				t.Errorf("check: exit %d, %q", code, errOut)
			}
		})
	}
	// status created nothing in the wrong directory.
	if names, _ := os.ReadDir(wrong); len(names) != 0 {
		t.Errorf("status left %v in %s", names, wrong)
	}
	if _, err := os.Stat(filepath.Join(dir, "leaderrun", "biling.lock")); err == nil {
		t.Errorf("status of a typo created its lock file")
	}
}
