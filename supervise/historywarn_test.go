//go:build linux

package supervise

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// TestHistoryEndFailureSaysWhatIsMissing: a failed write of a term's end
// record comes as leaderrun exits; its warning says the history will show
// the term without an end, not that "the run goes on".
func TestHistoryEndFailureSaysWhatIsMissing(t *testing.T) {
	h := &historyLocker{fail: true}
	var buf testsupport.SyncBuffer
	logTo := func(cfg *Config) { cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Warn}) }
	lease := newTestLease(5, 15*time.Second)
	clock, _, done := harness(t, "exit 0", lease, withHistory(h, HistoryConfig{Keep: 5}), logTo)
	if code := advanceUntilDone(t, clock, done, 100*time.Millisecond); code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}
	out := buf.String()
	var end string
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "record=end") {
			end = line
		}
	}
	if end == "" || strings.Contains(end, "the run goes on") || !strings.Contains(end, "without an end") {
		t.Fatalf("want the end record's failure said as a term without an end:\n%s", out)
	}
}
