//go:build linux

package chaos

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// RunTests is the body of the TestMain of a test binary that drives the
// binaries: it parses the flags, builds the binaries into *bins, runs the
// tests and removes the binaries again. Tests that passed still fail when
// a goroutine outlived them: every proxy, fence, process waiter and output
// reader must be gone once the tests have cleaned up. It returns the exit
// code for os.Exit. While the tests run, the test process reaps the orphans
// of the jobs it drives (ReapOrphans).
func RunTests(m *testing.M, bins *Binaries) int {
	flag.Parse()
	b, cleanup, err := BuildForTests()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cleanup()
	*bins = b
	stopReaping := ReapOrphans(b.Writer, b.Guard)
	code := m.Run()
	stopReaping()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines left behind:", err)
			code = 1
		}
	}
	return code
}
