//go:build linux

package cmdline

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestEveryBackendIsNamed fails when a text that lists the backends (help,
// man page, package description, the shared env file, package comments,
// completions) leaves one out: a new backend added to backendNames must
// reach all of them.
func TestEveryBackendIsNamed(t *testing.T) {
	read := func(path string) string {
		b, err := os.ReadFile("../../" + path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	// The first paragraph of a Go file: its package comment.
	pkgComment := func(path string) string {
		s := read(path)
		if i := strings.Index(s, "\npackage "); i >= 0 {
			return s[:i]
		}
		return s
	}
	// The lines of the env file up to the first setting after "Backend".
	envComment := func(path string) string {
		s := read(path)
		i := strings.Index(s, "# Backend")
		if i < 0 {
			t.Fatalf("%s has no '# Backend' comment", path)
		}
		j := strings.Index(s[i:], "#LEADERRUN_BACKEND")
		return s[i : i+j]
	}
	nfpm := read("packaging/nfpm.yaml")
	// The description: its one-line synopsis and the paragraph under it.
	desc := nfpm[strings.Index(nfpm, "description:"):strings.Index(nfpm, "homepage:")]
	texts := map[string]string{
		"help summary":              summary(),
		"man page DESCRIPTION":      manDescription()[0],
		"--backend usage":           backendList(),
		"package description":       desc,
		"leaderrun.env's comment":   envComment("packaging/systemd/leaderrun.env"),
		"main.go's package comment": pkgComment("main.go"),
		"locker's package comment":  pkgComment("locker/locker.go"),
		"bash completion":           bashCompletion()[strings.Index(bashCompletion(), "--backend)"):][:200],
		"zsh completion":            zshCompletion()[strings.Index(zshCompletion(), "--backend)"):][:100],
	}
	for what, text := range texts {
		for _, b := range backendNames() {
			if !strings.Contains(strings.ToLower(text), b) {
				t.Errorf("%s does not name the %s backend:\n%s", what, b, text)
			}
		}
	}
}

// TestReadmeBackendTable fails when the README's table of backends and the
// registry part: the same backends in the same order, each row listing
// exactly that backend's options.
func TestReadmeBackendTable(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z]+)` \\|[^|]*\\|([^|]*)\\|")
	var names []string
	for _, m := range row.FindAllStringSubmatch(string(readme), -1) {
		b := backendNamed(m[1])
		if b == nil {
			continue // another table
		}
		names = append(names, m[1])
		var listed, want []string
		for _, o := range regexp.MustCompile("`(--[a-z0-9-]+)`").FindAllStringSubmatch(m[2], -1) {
			listed = append(listed, o[1])
		}
		for _, f := range b.Flags() {
			want = append(want, "--"+f.Names()[0])
		}
		slices.Sort(listed)
		slices.Sort(want)
		if !slices.Equal(listed, want) {
			t.Errorf("README's %s row lists %q, the backend has %q", b.Name, listed, want)
		}
	}
	if !slices.Equal(names, backendNames()) {
		t.Errorf("README's backend table has %q, want %q", names, backendNames())
	}
}
