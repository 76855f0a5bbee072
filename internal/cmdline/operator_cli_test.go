package cmdline

import (
	"net"
	"strings"
	"testing"

	"github.com/leaderrun/leaderrun/internal/exitcode"
)

// history of a key never used exits like status does (3), naming where it
// looked; a used key without terms in range exits 0.
func TestHistoryNeverUsed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	code, out, errOut := leaderrun(t, nil, "history", "--backend", "local", "--lock-dir", dir, "biling")
	if code != exitcode.StatusNeverUsed || !strings.Contains(errOut, "was never used at "+dir) {
		t.Errorf("history of a key never used: exit %d, want %d naming %s\n%s%s", code, exitcode.StatusNeverUsed, dir, out, errOut)
	}
}

// history --since keeps a once-per term that ran within the window, though
// its period's slot began before it.
func TestHistorySinceOncePer(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if code, _, errOut := leaderrun(t, nil, "--backend", "local", "--lock-dir", dir, "--log-level", "off", "--key", "daily", "--once-per", "24h", "--", "true"); code != 0 {
		t.Fatalf("run: exit %d\n%s", code, errOut)
	}
	code, out, errOut := leaderrun(t, nil, "history", "--backend", "local", "--lock-dir", dir, "--since", "1h", "daily")
	if code != 0 || strings.Contains(out, "no terms recorded") || !strings.Contains(out, "succeeded") {
		t.Errorf("history --since 1h of a once-per run made just now: exit %d\n%s%s", code, out, errOut)
	}
	// The current period may still run: it is no missed slot, nor is
	// anything from before the window.
	if strings.Contains(out, "missed") {
		t.Errorf("history --since 1h shows a missed slot:\n%s", out)
	}
}

// A backend nobody answers at is logged as not reached, not as a refusal,
// with one holder and with slots.
func TestUnreachableIsNotRefused(t *testing.T) {
	t.Parallel()
	// A port nothing listens on: bind one and close it.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	for _, extra := range [][]string{nil, {"--holders", "2"}} {
		args := append([]string{"--no-wait", "--backend", "etcd", "--etcd-endpoints", addr, "--key", "k"}, extra...)
		code, _, errOut := leaderrun(t, nil, append(args, "--", "true")...)
		if code != exitcode.Internal || strings.Contains(errOut, "backend refused") || !strings.Contains(errOut, "could not be reached") {
			t.Errorf("%v: exit %d, want %d saying the backend could not be reached, not that it refused:\n%s", extra, code, exitcode.Internal, errOut)
		}
	}
}
