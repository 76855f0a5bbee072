//go:build linux

package cmdline

import (
	"os"
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
	// The description's first line, its one-line summary.
	desc := strings.SplitN(nfpm[strings.Index(nfpm, "description:"):], "\n", 3)[1]
	texts := map[string]string{
		"help summary":              summary(),
		"man page DESCRIPTION":      manDescription()[0],
		"--backend usage":           backendList(),
		"package description":       desc,
		"leaderrun.env's comment":   envComment("packaging/systemd/leaderrun.env"),
		"main.go's package comment": pkgComment("main.go"),
		"locker's package comment":  pkgComment("locker/locker.go"),
		"bash completion":           bashCompletion[strings.Index(bashCompletion, "--backend)"):][:200],
		"zsh completion":            zshCompletion[strings.Index(zshCompletion, "--backend)"):][:100],
	}
	for what, text := range texts {
		for _, b := range backendNames() {
			if !strings.Contains(strings.ToLower(text), b) {
				t.Errorf("%s does not name the %s backend:\n%s", what, b, text)
			}
		}
	}
}
