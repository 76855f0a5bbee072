//go:build linux

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackageVersionsOfLaterCommitsSortLater: the package of a commit
// between releases must sort after that of an earlier commit, or
// `apt install ./leaderrun_*.deb` of the newer build is refused as a
// downgrade. The Makefile's PKG_VERSION is read in a scratch repository
// with two commits a minute apart whose abbreviated hashes sort the wrong
// way round.
func TestPackageVersionsOfLaterCommitsSortLater(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("dpkg"); err != nil {
		t.Skip("dpkg is missing")
	}
	dir := t.TempDir()
	mk, err := os.ReadFile(repoFile(t, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "Makefile"), mk, 0o644); err != nil {
		t.Fatal(err)
	}
	git := func(date string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"}, args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_DATE="+date, "GIT_COMMITTER_DATE="+date)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	version := func() string {
		t.Helper()
		cmd := exec.Command("make", "-s", "--no-print-directory", "--eval", "print-pkg-version: ; @echo $(PKG_VERSION)", "print-pkg-version")
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make: %v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("", "init", "-q")
	git("2026-01-01T10:00:00Z", "commit", "-q", "--allow-empty", "-m", "first")
	first := git("", "rev-parse", "--short", "HEAD")
	older := version()
	// Later commits until one's abbreviated hash sorts before the first's.
	for i := 0; ; i++ {
		git("2026-01-01T10:01:00Z", "commit", "-q", "--allow-empty", "-m", "second "+string(rune('a'+i%26))+strings.Repeat("x", i/26))
		if git("", "rev-parse", "--short", "HEAD") < first {
			break
		}
		git("", "reset", "-q", "--hard", "HEAD~1")
	}
	newer := version()
	if err := exec.Command("dpkg", "--compare-versions", newer, "gt", older).Run(); err != nil {
		t.Fatalf("package version of the later commit %q does not sort after the earlier one's %q", newer, older)
	}
	if !strings.HasPrefix(older, "0.0.0~git") {
		t.Errorf("version between releases %q, want 0.0.0~git...", older)
	}
	t.Logf("%s < %s", older, newer)
}
