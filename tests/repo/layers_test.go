package repo

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// packageDeps lists every package of the module with all it depends on.
func packageDeps(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Deps " "}}`, "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		deps[f[0]] = f[1:]
	}
	if len(deps) < 20 {
		t.Fatalf("go list found only %d packages", len(deps))
	}
	return deps
}

const module = "github.com/leaderrun/leaderrun"

// TestOnlyTheCommandLineSeesTheFlagParser fails when a package below the
// command line (internal/cmdline and the root's main) depends on
// urfave/cli: what a run needs reaches them as parsed values.
func TestOnlyTheCommandLineSeesTheFlagParser(t *testing.T) {
	above := []string{module, module + "/internal/cmdline"}
	for pkg, deps := range packageDeps(t) {
		if slices.Contains(above, pkg) {
			continue
		}
		for _, d := range deps {
			if strings.HasPrefix(d, "github.com/urfave/cli") {
				t.Errorf("%s depends on %s; only the command line may", pkg, d)
			}
		}
	}
}

// TestGuardLinksNoClientLibrary fails when the small guard, or a backend's
// wire package (what the guard and the backend share), links more than
// the standard library, golang.org/x/sys and leaderrun's own small
// packages: the guard stays a few MiB for the life of every job.
func TestGuardLinksNoClientLibrary(t *testing.T) {
	deps := packageDeps(t)
	checked := 0
	for pkg, list := range deps {
		if pkg != module+"/cmd/leaderrun-guard" && !strings.HasSuffix(pkg, "wire") {
			continue
		}
		checked++
		for _, d := range list {
			first, _, _ := strings.Cut(d, "/")
			switch {
			case !strings.Contains(first, "."), strings.HasPrefix(d, "golang.org/x/sys/"):
			case strings.HasPrefix(d, module+"/"):
				if _, ok := deps[d]; !ok {
					t.Errorf("%s: unknown package %s", pkg, d)
				}
			default:
				t.Errorf("%s links %s", pkg, d)
			}
		}
	}
	if checked < 5 {
		t.Fatalf("checked %d packages, want the guard and four wire packages", checked)
	}
}

// TestMakefileSetsTheVersion builds leaderrun with the Makefile's -X flags
// and checks that `leaderrun version` prints what they set: a -X naming a
// package or variable that does not exist is silently ignored by the
// linker.
func TestMakefileSetsTheVersion(t *testing.T) {
	out, err := exec.Command("make", "-s", "-C", root, "-f", "Makefile", "--eval", "print-ldflags: ; @echo '$(LDFLAGS)'", "print-ldflags",
		"VERSION=9.8.7-test", "COMMIT=abcdef123456").Output()
	if err != nil {
		t.Fatalf("make print-ldflags: %v", err)
	}
	bin := t.TempDir() + "/leaderrun"
	build := exec.Command("go", "build", "-ldflags", strings.TrimSpace(string(out)), "-o", bin, ".")
	build.Dir = root
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	v, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(v), "9.8.7-test") || !strings.Contains(string(v), "abcdef123456") {
		t.Errorf("leaderrun version = %q, want the Makefile's version and commit", v)
	}
}

// TestBuildTagsAgree checks that the benchmark's and the suite's leaderrun
// (tests/chaos) is built with the Makefile's TAGS, so that the footprint
// they measure is the shipped binary's, and that the tags leave urfave/cli's
// document writers out: a misspelt tag is silently ignored by go build.
func TestBuildTagsAgree(t *testing.T) {
	out, err := exec.Command("make", "-s", "-C", root, "-f", "Makefile", "--eval", "print-tags: ; @echo '$(TAGS)'", "print-tags").Output()
	if err != nil {
		t.Fatalf("make print-tags: %v", err)
	}
	tags := strings.TrimSpace(string(out))
	src, err := os.ReadFile(filepath.Join(root, "tests/chaos/build.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(src), `"-tags=`+tags+`"`) {
		t.Errorf("tests/chaos/build.go does not build with -tags=%s, the Makefile's TAGS", tags)
	}
	list := exec.Command("go", "list", "-tags", tags, "-deps", ".")
	list.Dir = root
	deps, err := list.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	if strings.Contains(string(deps), "blackfriday") {
		t.Errorf("with -tags %s leaderrun still links blackfriday (urfave/cli's document writers)", tags)
	}
}
