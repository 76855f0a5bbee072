package e2e

import (
	"strings"
	"testing"
	"time"
)

// TestHeldBackIsNotAnOutage: a candidate held back — its key paused, its
// health check failing — whose --acquire-timeout passes exits 124, as
// --no-wait does in the same state, and its last line says why. It used to
// exit 125, "no holder was seen", which the packaged unit never restarts
// (RestartPreventExitStatus=125): a maintenance pause left the unit down
// for good.
func TestHeldBackIsNotAnOutage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key := newKey("heldback")
	q := []string{"--backend", "local", "--lock-dir", dir, key}
	if code, _, errOut, _ := runOnce(t, nil, append([]string{"pause", "--reason", "schema migration"}, q...)...); code != 0 {
		t.Fatalf("pause: exit %d\n%s", code, errOut)
	}
	for _, tc := range []struct {
		name, why string
		args      []string
	}{
		{"paused, --acquire-timeout", "schema migration", []string{"--acquire-timeout", "1s"}},
		{"paused, --no-wait", "schema migration", []string{"--no-wait"}},
	} {
		p := start(t, tc.name, nil, append(localArgs(dir, key, tc.args...), "--", "true")...)
		code := p.Wait(30 * time.Second)
		lines := strings.Split(strings.TrimSpace(p.Output()), "\n")
		if last := lines[len(lines)-1]; code != 124 || !strings.Contains(last, tc.why) {
			t.Errorf("%s: exit %d, last line %q; want 124 and the reason, %q\n%s", tc.name, code, last, tc.why, p.Output())
		}
	}

	other := newKey("unhealthy")
	p := start(t, "failing health check", nil, append(localArgs(dir, other, "--health-cmd", "false", "--acquire-timeout", "2s"), "--", "true")...)
	code := p.Wait(30 * time.Second)
	lines := strings.Split(strings.TrimSpace(p.Output()), "\n")
	if last := lines[len(lines)-1]; code != 124 || !strings.Contains(last, "health check fails") {
		t.Errorf("a failing health check, --acquire-timeout 2s: exit %d, last line %q; want 124 and the reason\n%s", code, last, p.Output())
	}
}
