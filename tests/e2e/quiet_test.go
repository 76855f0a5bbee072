package e2e

import (
	"os/exec"
	"strings"
	"testing"
)

// A successful cron run says little: two info lines (the job's start and
// end), nothing at all with -q, so a crontab line mails only what went
// wrong (docs/OPERATING.md, "Quiet on success").
func TestSuccessfulRunIsQuiet(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		quiet bool
		want  []string
	}{
		{false, []string{"child started", "child exited"}},
		{true, nil},
	} {
		args := localArgs(dir, "nightly", "--once-per", "1h")
		if tc.quiet {
			args = append(args, "-q")
		}
		// A new slot each time: --run-id names it.
		args = append(args, "--run-id", map[bool]string{false: "a", true: "b"}[tc.quiet], "--", "true")
		out, err := exec.Command(binary, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("quiet=%v: %v\n%s", tc.quiet, err, out)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(tc.want) == 0 && len(out) > 0 || len(tc.want) > 0 && len(lines) != len(tc.want) {
			t.Fatalf("quiet=%v: a successful run wrote %d lines, want %d (%q):\n%s", tc.quiet, len(lines), len(tc.want), tc.want, out)
		}
		for i, w := range tc.want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("quiet=%v: line %d is %q, want %q", tc.quiet, i+1, lines[i], w)
			}
		}
	}
}
