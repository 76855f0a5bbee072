//go:build linux

package cmdline

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// rssFile reads RssFile (KiB) from /proc/self/status.
func rssFile(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "RssFile:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no RssFile in /proc/self/status")
	return 0
}

// The binary's pages touched at start-up leave the resident set, and the
// process runs on: whatever it needs again is mapped back from the file.
func TestTrimResidentDropsStartupPages(t *testing.T) {
	before := rssFile(t)
	trimResident()
	after := rssFile(t)
	t.Logf("RssFile %d KiB -> %d KiB", before, after)
	if after >= before {
		t.Fatalf("RssFile did not shrink: %d KiB -> %d KiB", before, after)
	}
	// Code and read-only data come back on use: parsing a command line
	// touches the flags and the cli package again.
	if code := runApp([]string{"leaderrun", "version"}); code != 0 {
		t.Fatalf("after the trim, leaderrun version exited %d", code)
	}
}
