//go:build linux

package chaos

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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

// Run is one run's results, written as a Markdown file of its own (under
// docs/results/) and listed by a line in its method doc's Results list.
type Run struct {
	// Path is the file to write whole or, when it ends in "/" or names a
	// directory, the directory that receives a new file named
	// KIND-DATE-DESC.md, with "-2", "-3" … before ".md" when the name is
	// taken: a run never overwrites another's file.
	Path string
	// Index is the method doc (docs/CHAOS.md) whose list named List
	// receives the run's line; none when empty.
	Index, List string
	Kind, Desc  string    // "chaos", "bench"; what ran: "etcd-postgres", "full"
	When        time.Time // when the run ended; its UTC day names the file
	Title       string    // the file's heading
	Tree        string    // the commit the run started from
	Summary     string    // the list line's what ran and the outcome
	Body        string    // the report: command, seed, tree, machine, tables
}

// WriteRun writes r's file and adds its line at the top of r.Index's list
// (newest first): "- [DATE TIME UTC](FILE), tree TREE: SUMMARY", FILE
// relative to the index's folder. It returns the file written.
func WriteRun(r Run) (string, error) {
	file := r.Path
	if st, err := os.Stat(r.Path); strings.HasSuffix(r.Path, "/") || (err == nil && st.IsDir()) {
		if err := os.MkdirAll(r.Path, 0o755); err != nil {
			return "", err
		}
		base := r.Kind + "-" + r.When.UTC().Format("2006-01-02") + "-" + Slug(r.Desc)
		file = filepath.Join(r.Path, base+".md")
		for n := 2; ; n++ {
			if _, err := os.Stat(file); os.IsNotExist(err) {
				break
			} else if err != nil {
				return "", err
			}
			file = filepath.Join(r.Path, fmt.Sprintf("%s-%d.md", base, n))
		}
	}
	var b strings.Builder
	b.WriteString("# " + r.Title + "\n\n")
	if r.Index != "" {
		if rel, err := filepath.Rel(filepath.Dir(file), r.Index); err == nil {
			fmt.Fprintf(&b, "Method: [%s](%s).\n\n", filepath.Base(r.Index), filepath.ToSlash(rel))
		}
	}
	b.WriteString(strings.TrimRight(r.Body, "\n") + "\n")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		return "", err
	}
	if r.Index == "" {
		return file, nil
	}
	rel, err := filepath.Rel(filepath.Dir(r.Index), file)
	if err != nil {
		return file, err
	}
	line := fmt.Sprintf("- [%s](%s), tree %s: %s", r.When.UTC().Format("2006-01-02 15:04 MST"), filepath.ToSlash(rel), r.Tree, r.Summary)
	return file, AddToList(r.Index, r.List, line)
}

// AddToList puts line first between the lines "<!-- BEGIN name -->" and
// "<!-- END name -->" of the Markdown file at path, keeping the rest.
// Missing markers are appended at the end, around the line.
func AddToList(path, name, line string) error {
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	begin, end := "<!-- BEGIN "+name+" -->", "<!-- END "+name+" -->"
	s := string(b)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		return ReplaceSection(path, name, line)
	}
	at := i + len(begin)
	s = s[:at] + "\n" + line + s[at:]
	return os.WriteFile(path, []byte(s), 0o644)
}

// Slug makes s a file name's part: lower case, runs of anything but
// letters and digits as one "-".
func Slug(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			b.WriteRune(r)
			dash = false
		} else {
			dash = true
		}
	}
	return b.String()
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
