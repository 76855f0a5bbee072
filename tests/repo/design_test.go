package repo

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// designSection matches a section heading of docs/DESIGN.md: "## 4." or
// "### 1.12".
var designSection = regexp.MustCompile(`(?m)^#{2,3} (\d+(?:\.\d+)?)[. ]`)

// designCitation matches "§1.2", and the end of a range "§1.2-1.4".
var designCitation = regexp.MustCompile(`§(\d+(?:\.\d+)?)(?:-(\d+(?:\.\d+)?))?`)

// TestDesignCitations fails when a Go comment cites a section of the design
// document ("DESIGN §1.3", "(§1.3)") that neither docs/DESIGN.md nor
// docs/DESIGN-SAFETY.md (its §1) has.
func TestDesignCitations(t *testing.T) {
	// §1, the safety model, has a file of its own.
	var doc []byte
	for _, f := range []string{"docs/DESIGN.md", "docs/DESIGN-SAFETY.md"} {
		b, err := os.ReadFile(root + f)
		if err != nil {
			t.Fatal(err)
		}
		doc = append(doc, b...)
	}
	sections := map[string]bool{}
	for _, m := range designSection.FindAllStringSubmatch(string(doc), -1) {
		sections[m[1]] = true
	}
	if !sections["1.12"] || !sections["4"] {
		t.Fatalf("docs/DESIGN.md sections not recognised: %v", sections)
	}
	cited := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bin" || d.Name() == "dist") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(src), "\n") {
			for _, m := range designCitation.FindAllStringSubmatch(line, -1) {
				for _, sec := range m[1:] {
					if sec == "" {
						continue
					}
					cited++
					if !sections[sec] {
						t.Errorf("%s:%d cites DESIGN §%s, which docs/DESIGN.md and docs/DESIGN-SAFETY.md lack", path, i+1, sec)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if cited < 10 {
		t.Fatalf("found only %d citations: is the walk looking at the sources?", cited)
	}
}
