package repo

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// readmeMaxLines is the README's length limit: it is the way in, and the
// details live in docs/.
const readmeMaxLines = 350

// inlineLink matches a Markdown inline link or image, [text](target) or
// [text](target "title"), and captures the target.
var inlineLink = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)

// refLink matches a reference definition, "[name]: target".
var refLink = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)`)

// hasScheme matches a target with a URL scheme: "https:", "mailto:".
var hasScheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)

// codeSpan matches inline code, whose text is not Markdown.
var codeSpan = regexp.MustCompile("`+[^`]*`+")

// atxHeading matches a heading line, "## Text" or "## Text ##".
var atxHeading = regexp.MustCompile(`^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$`)

// mdDoc is one Markdown file, split into what its links and anchors are
// made of.
type mdDoc struct {
	path    string   // relative to the repository's root, slash-separated
	prose   []string // its lines outside fenced code blocks, code spans blanked
	anchors map[string]bool
}

// readMarkdown reads the Markdown file rel under base and collects its
// prose lines and the anchors of its headings.
func readMarkdown(t *testing.T, base, rel string) *mdDoc {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(base, rel))
	if err != nil {
		t.Fatal(err)
	}
	d := &mdDoc{path: rel, anchors: map[string]bool{}}
	seen := map[string]int{}
	fence := ""
	for _, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			d.prose = append(d.prose, "")
			continue
		}
		if len(line)-len(trimmed) < 4 && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")) {
			fence = trimmed[:3]
			d.prose = append(d.prose, "")
			continue
		}
		d.prose = append(d.prose, codeSpan.ReplaceAllStringFunc(line, func(s string) string {
			return strings.Repeat(" ", len(s))
		}))
		if m := atxHeading.FindStringSubmatch(line); m != nil {
			slug := githubSlug(m[2])
			if n := seen[slug]; n > 0 {
				d.anchors[fmt.Sprintf("%s-%d", slug, n)] = true
			} else {
				d.anchors[slug] = true
			}
			seen[slug]++
		}
	}
	return d
}

// mdLinkText keeps the text of a link in a heading, "[text](url)".
var mdLinkText = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)

// githubSlug is the anchor GitHub gives a heading: the text as rendered
// (no backticks, emphasis markers or link targets), lower-cased, every
// character that is not a letter, digit, '-', '_' or space dropped, and
// spaces made '-'. Duplicates get "-1", "-2" in readMarkdown.
func githubSlug(heading string) string {
	text := mdLinkText.ReplaceAllString(heading, "$1")
	text = strings.NewReplacer("`", "", "*", "").Replace(text)
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// mdLink is one relative link found in a document.
type mdLink struct {
	line   int
	target string
}

// relativeLinks lists the links of d that point into the repository: not
// those with a scheme (https:, mailto:) or a protocol-relative "//".
func relativeLinks(d *mdDoc) []mdLink {
	var links []mdLink
	add := func(line int, target string) {
		if target == "" || strings.HasPrefix(target, "//") || hasScheme.MatchString(target) {
			return
		}
		links = append(links, mdLink{line, target})
	}
	for i, line := range d.prose {
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			add(i+1, m[1])
		}
		for _, m := range refLink.FindAllStringSubmatch(line, -1) {
			add(i+1, m[1])
		}
	}
	return links
}

// markdownDocs is README.md, every docs/*.md and docs/results/*.md,
// relative to root.
func markdownDocs(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	// The chaos suite's and the benchmark's runs, one file each.
	results, err := filepath.Glob(filepath.Join(root, "docs", "results", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, results...)
	out := []string{"README.md"}
	for _, p := range docs {
		rel, err := filepath.Rel(root, p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, filepath.ToSlash(rel))
	}
	if len(out) < 5 {
		t.Fatalf("found only %v: is root the repository's top?", out)
	}
	return out
}

// brokenLinks checks every relative link of the documents docs, paths
// relative to base: its file must exist under base and, for "#anchor", be
// a Markdown file with a heading of that anchor. It returns one line per
// broken link and the number of links checked.
func brokenLinks(t *testing.T, base string, docs []string) (broken []string, checked int) {
	t.Helper()
	parsed := map[string]*mdDoc{}
	load := func(rel string) *mdDoc {
		if parsed[rel] == nil {
			parsed[rel] = readMarkdown(t, base, rel)
		}
		return parsed[rel]
	}
	for _, rel := range docs {
		d := load(rel)
		for _, l := range relativeLinks(d) {
			checked++
			file, anchor, _ := strings.Cut(l.target, "#")
			where := fmt.Sprintf("%s:%d: link %q", rel, l.line, l.target)
			target := rel
			if file != "" {
				target = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(rel), file)))
				if target == ".." || strings.HasPrefix(target, "../") || filepath.IsAbs(file) {
					broken = append(broken, where+" leaves the repository")
					continue
				}
				if _, err := os.Stat(filepath.Join(base, target)); err != nil {
					broken = append(broken, fmt.Sprintf("%s: no file %s", where, target))
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(target, ".md") {
				broken = append(broken, fmt.Sprintf("%s: anchor into %s, which is not Markdown", where, target))
				continue
			}
			if !load(target).anchors[anchor] {
				broken = append(broken, fmt.Sprintf("%s: %s has no heading #%s", where, target, anchor))
			}
		}
	}
	return broken, checked
}

// TestDocLinksResolve fails when a relative link in README.md or docs/*.md
// points to a file that does not exist, or to a heading its file lacks.
func TestDocLinksResolve(t *testing.T) {
	broken, checked := brokenLinks(t, root, markdownDocs(t))
	for _, b := range broken {
		t.Error(b)
	}
	if checked < 20 {
		t.Fatalf("checked only %d links: is the link pattern still right?", checked)
	}
	t.Logf("%d relative links checked", checked)
}

// TestReadmeLength fails when README.md grows past readmeMaxLines.
func TestReadmeLength(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > readmeMaxLines {
		t.Errorf("README.md has %d lines, more than %d: move details to docs/ and link them", n, readmeMaxLines)
	}
}

// TestBrokenLinksAreFound proves the checker itself on a scratch tree: a
// missing file, a missing heading in another file and in the same file,
// and a link out of the tree are reported; good links, duplicate headings'
// "-1" anchors, links in code and web links are not.
func TestBrokenLinksAreFound(t *testing.T) {
	dir := t.TempDir()
	doc := strings.Join([]string{
		"# Scratch",
		"",
		"## A `code` heading: with punctuation!",
		"",
		"## A `code` heading: with punctuation!",
		"",
		"Good: [self](#scratch), [code](#a-code-heading-with-punctuation),",
		"[dup](#a-code-heading-with-punctuation-1), [other](sub/other.md#other-heading), [dir](sub).",
		"Bad: [gone](missing.md), [no heading](sub/other.md#nowhere), [self](#nowhere-here),",
		"[out](../outside.md).",
		"",
		"```",
		"[in a fence](ignored.md)",
		"```",
		"",
		"`[in a code span](ignored.md)` and [web](https://example.org/x.md).",
		"",
		"[ref]: sub/other.md",
	}, "\n")
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"scratch.md": doc, "sub/other.md": "# Other heading\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	broken, checked := brokenLinks(t, dir, []string{"scratch.md"})
	if checked != 10 {
		t.Errorf("checked %d links, want 10 (fenced, code-span and web links skipped)", checked)
	}
	want := []string{
		"no file missing.md",
		"sub/other.md has no heading #nowhere",
		"scratch.md has no heading #nowhere-here",
		"leaves the repository",
	}
	if len(broken) != len(want) {
		t.Fatalf("broken = %q, want %d complaints", broken, len(want))
	}
	for i, w := range want {
		if !strings.Contains(broken[i], w) {
			t.Errorf("complaint %d = %q, want it to say %q", i, broken[i], w)
		}
	}
}

// docCitation matches a comment's pointer into the documents, as the unit
// file writes it: "(SAFETY.md: Layers of protection)" or "(README: …)".
var docCitation = regexp.MustCompile(`\((README|[A-Z]+\.md): ([^)]+)\)`)

// TestPackagingCitesHeadingsThatExist fails when a file the packages ship
// sends the reader to a section of a document that has no such heading (the
// unit cited a README section after it moved to SAFETY.md).
func TestPackagingCitesHeadingsThatExist(t *testing.T) {
	checked := 0
	err := filepath.WalkDir(filepath.Join(root, "packaging"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range docCitation.FindAllStringSubmatch(string(b), -1) {
			rel := "README.md"
			if m[1] != "README" {
				rel = "docs/" + m[1]
			}
			checked++
			if !readMarkdown(t, root, rel).anchors[githubSlug(m[2])] {
				t.Errorf("%s cites %q, a heading %s lacks", path, m[0], rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("no citation found in packaging/: is the pattern still right?")
	}
}
