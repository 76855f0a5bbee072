package cmdline

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestManPage checks leaderrun(1) as generated from the CLI definition:
// the sections a reader looks for, a synopsis that shows "-- COMMAND",
// every option, and a page man renders without warnings in 80 columns.
func TestManPage(t *testing.T) {
	t.Parallel()
	page, err := manPage(newApp(nil))
	if err != nil {
		t.Fatal(err)
	}
	var sections []string
	for _, m := range regexp.MustCompile(`(?m)^\.SH (.*)$`).FindAllStringSubmatch(page, -1) {
		sections = append(sections, m[1])
	}
	want := []string{"NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "COMMANDS", "EXIT STATUS", "ENVIRONMENT", "FILES", "EXAMPLES", "SEE ALSO"}
	if strings.Join(sections, ",") != strings.Join(want, ",") {
		t.Errorf("sections %q, want %q", sections, want)
	}
	synopsis := page[strings.Index(page, ".SH SYNOPSIS"):strings.Index(page, ".SH DESCRIPTION")]
	if !strings.Contains(synopsis, `\fB\-\-\fR \fICOMMAND\fR`) || strings.Count(synopsis, "\n") > 2*len(synopses) {
		t.Errorf("SYNOPSIS must be a few lines showing -- COMMAND:\n%s", synopsis)
	}
	for _, d := range visibleFlags(newApp(nil).Flags) {
		if !strings.Contains(page, `\fB`+roffText(d.Name)+`\fR`) {
			t.Errorf("the man page lacks %s", d.Name)
		}
	}
	for _, w := range []string{"cron", "systemctl enable", "leaderrun check || exit 1", "/etc/leaderrun/leaderrun.env", "LEADER_EPOCH"} {
		if !strings.Contains(page, roffText(w)) {
			t.Errorf("the man page lacks %q", w)
		}
	}

	man, err := exec.LookPath("man")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("man is not installed (apt-get install man-db)")
		}
		t.Skip("man is not installed (apt-get install man-db)")
	}
	file := filepath.Join(t.TempDir(), "leaderrun.1")
	if err := os.WriteFile(file, []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(man, "--warnings", "-l", file)
	cmd.Env = append(os.Environ(), "MANWIDTH=80", "MAN_KEEP_FORMATTING=0", "PAGER=cat", "LANG=C.UTF-8")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || stderr.Len() > 0 {
		t.Fatalf("man -l: %v, warnings:\n%s", err, stderr.String())
	}
	// man may still embolden by overstriking: "x\bx".
	out = regexp.MustCompile(".\b").ReplaceAll(out, nil)
	// A literal example is one line to copy, however wide.
	for i, line := range strings.Split(string(out), "\n") {
		if n := len([]rune(line)); n > 80 && !slices.Contains(manExampleLines(), strings.TrimSpace(line)) {
			t.Errorf("rendered line %d is %d columns: %q", i+1, n, line)
		}
	}
	if !strings.Contains(string(out), "leaderrun [options] --key KEY -- COMMAND [ARG...]") {
		t.Errorf("rendered synopsis lacks the run form:\n%.600s", out)
	}
}

// manExampleLines are the lines of the man page's literal examples.
func manExampleLines() []string {
	var lines []string
	for _, sec := range manSections {
		if sec.title != "EXAMPLES" {
			continue
		}
		for _, p := range sec.paras {
			if strings.HasPrefix(p, "  ") {
				lines = append(lines, strings.Split(strings.TrimPrefix(p, "  "), "\n")...)
			}
		}
	}
	return lines
}

// TestManPageDocsPaths: the .deb ships the docs gzipped (README.md.gz,
// DESIGN.md.gz) and the .rpm plain: the man page names the directory and
// says both, not a path that exists on one of them only.
func TestManPageDocsPaths(t *testing.T) {
	t.Parallel()
	page, err := manPage(newApp(nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"/usr/share/doc/leaderrun/DESIGN.md", "/usr/share/doc/leaderrun/README.md"} {
		if strings.Contains(page, roffText(bad)) {
			t.Errorf("the man page names %s, which the .deb ships as %s.gz", bad, bad)
		}
	}
	for _, want := range []string{"/usr/share/doc/leaderrun/", "as .gz", "Debian"} {
		if !strings.Contains(page, roffText(want)) {
			t.Errorf("the man page does not say %q of the docs' place", want)
		}
	}
}
