//go:build linux

package chaos

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// ReplaceSection writes content between the lines "<!-- BEGIN name -->" and
// "<!-- END name -->" of the Markdown file at path, keeping the prose
// around them. Missing markers are appended at the end.
func ReplaceSection(path, name, content string) error {
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	begin, end := "<!-- BEGIN "+name+" -->", "<!-- END "+name+" -->"
	s := string(b)
	block := begin + "\n" + strings.TrimRight(content, "\n") + "\n" + end
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		if s != "" && !strings.HasSuffix(s, "\n") {
			s += "\n"
		}
		s += "\n" + block + "\n"
	} else {
		s = s[:i] + block + s[j+len(end):]
	}
	return os.WriteFile(path, []byte(s), 0o644)
}

// Commit describes the checked-out tree for reports: the commit, and
// "(with local changes)" when files differ from it.
func Commit() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown commit"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
		c += " (with local changes)"
	}
	return c
}

// Durations summarises a sample of durations.
type Durations []time.Duration

// sorted returns a sorted copy.
func (d Durations) sorted() []time.Duration {
	s := slices.Clone([]time.Duration(d))
	slices.Sort(s)
	return s
}

// Quantile is the q-quantile (0..1) by the nearest-rank method; 0 for an
// empty sample.
func (d Durations) Quantile(q float64) time.Duration {
	s := d.sorted()
	if len(s) == 0 {
		return 0
	}
	i := int(q*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// Median is the 0.5-quantile.
func (d Durations) Median() time.Duration { return d.Quantile(0.5) }

// Min is the smallest value, 0 for an empty sample.
func (d Durations) Min() time.Duration { return d.Quantile(0) }

// Max is the largest value, 0 for an empty sample.
func (d Durations) Max() time.Duration { return d.Quantile(1) }

// Ms formats a duration in milliseconds, or "–" for an empty sample.
func Ms(d time.Duration) string {
	return fmt.Sprintf("%d ms", d.Round(time.Millisecond).Milliseconds())
}

// Table renders a Markdown table.
func Table(header []string, rows [][]string) string {
	var b strings.Builder
	b.WriteString("| " + strings.Join(header, " | ") + " |\n")
	seps := make([]string, len(header))
	for i := range seps {
		seps[i] = "---"
	}
	b.WriteString("|" + strings.Join(seps, "|") + "|\n")
	for _, r := range rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	return b.String()
}
