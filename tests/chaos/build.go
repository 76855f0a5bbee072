//go:build linux

package chaos

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Binaries are the programs the suite and the benchmark start.
type Binaries struct {
	// Leaderrun is the leaderrun binary built from this tree.
	Leaderrun string
	// Writer is the fenced-resource writer (tests/fence/writer).
	Writer string
	// Guard is leaderrun-guard, next to Leaderrun, where leaderrun looks
	// for it.
	Guard string
}

// Build builds leaderrun and the writer into dir. With race set (as
// LEADERRUN_TEST_RACE=1 asks in the e2e tests), leaderrun is built with the
// race detector; otherwise everything is built as the packages build it
// (static, trimmed, stripped).
func Build(dir string, race bool) (Binaries, error) {
	b := Binaries{Leaderrun: filepath.Join(dir, "leaderrun"), Writer: filepath.Join(dir, "fence-writer"), Guard: filepath.Join(dir, "leaderrun-guard")}
	builds := []struct {
		out, pkg string
		race     bool
	}{
		{b.Leaderrun, "github.com/leaderrun/leaderrun", race},
		{b.Writer, "github.com/leaderrun/leaderrun/tests/fence/writer", false},
		{b.Guard, "github.com/leaderrun/leaderrun/cmd/leaderrun-guard", false},
	}
	for _, x := range builds {
		args := []string{"build", "-o", x.out}
		env := os.Environ()
		if x.race {
			args = append(args, "-race")
		} else {
			// As the packages build them (Makefile, TAGS too): what the
			// benchmark's footprint measures is what operators run.
			args = append(args, "-trimpath", "-tags=urfave_cli_no_docs", "-ldflags=-s -w")
			env = append(env, "CGO_ENABLED=0")
		}
		cmd := exec.Command("go", append(args, x.pkg)...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			return b, fmt.Errorf("go build %s: %v\n%s", x.pkg, err, out)
		}
	}
	return b, nil
}

// CopyTo copies the binaries into dir. Processes are told apart by their
// executable's path, so suites that run side by side each use a copy of
// their own.
func (b Binaries) CopyTo(dir string) (Binaries, error) {
	c := Binaries{Leaderrun: filepath.Join(dir, "leaderrun"), Writer: filepath.Join(dir, "fence-writer"), Guard: filepath.Join(dir, "leaderrun-guard")}
	for _, x := range [][2]string{{b.Leaderrun, c.Leaderrun}, {b.Writer, c.Writer}, {b.Guard, c.Guard}} {
		data, err := os.ReadFile(x[0])
		if err != nil {
			return c, err
		}
		if err := os.WriteFile(x[1], data, 0o755); err != nil {
			return c, err
		}
	}
	return c, nil
}

// BuildForTests builds the binaries into a new temporary folder for a test
// binary's TestMain, honouring LEADERRUN_TEST_RACE=1; call the returned
// function when the tests are over to remove them.
func BuildForTests() (Binaries, func(), error) {
	dir, err := os.MkdirTemp("", "leaderrun-chaos-")
	if err != nil {
		return Binaries{}, nil, err
	}
	b, err := Build(dir, os.Getenv("LEADERRUN_TEST_RACE") == "1")
	if err != nil {
		os.RemoveAll(dir)
		return b, nil, err
	}
	return b, func() { os.RemoveAll(dir) }, nil
}
