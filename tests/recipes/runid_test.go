//go:build linux

package recipes

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/chaos"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// runOnce runs leaderrun with args and command to its end and returns its
// exit code and log.
func runOnce(t *testing.T, name string, args []string, env []string, command string) (int, string) {
	t.Helper()
	p, err := chaos.Start(chaos.ProcSpec{
		Name: name, Path: bins.Leaderrun,
		Args:    append(append([]string{}, args...), "--id", name, "--", "sh", "-c", command),
		Env:     env,
		LogPath: filepath.Join(t.TempDir(), name+".log"),
	})
	if err != nil {
		t.Fatal(err)
	}
	code, ok := p.Wait(60 * time.Second)
	if !ok {
		p.Kill()
		t.Fatalf("%s: leaderrun still runs after 60s:\n%s", name, p.Output(8<<10))
	}
	return code, p.Output(16 << 10)
}

// TestSendOnceRecipe: examples/send-once.sh hands a run's message to the
// mailer once, although the run's first try crashed after sending and a
// retry of the same slot (another leadership, the same LEADER_RUN_ID) runs
// the job again; a run of the next slot sends its own.
func TestSendOnceRecipe(t *testing.T) {
	e := testcluster.StartEtcd(t, 1)
	dir := t.TempDir()
	mbox := filepath.Join(dir, "mbox")
	mailer := filepath.Join(dir, "sendmail")
	// The mailer: append the message to the mailbox, one "From " line per
	// message as in an mbox.
	if err := os.WriteFile(mailer, []byte("#!/bin/sh\n{ echo 'From leaderrun'; cat; } >> "+mbox+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + jobPath(t, "etcdctl"), "SENDMAIL=" + mailer}
	ids := filepath.Join(dir, "ids")
	args := func(slot string) []string {
		return append(etcdArgs(e, "recipe-mail"), "--run-id", slot)
	}
	job := func(code string) string {
		return `echo "$LEADER_RUN_ID" >> ` + ids + `; printf 'Subject: invoice\n\nthe bill\n' | send-once.sh; exit ` + code
	}

	// The first try sends, then crashes before it could say it succeeded:
	// the slot is not recorded and will be retried.
	if code, out := runOnce(t, "try1", args("2026-12-01"), env, job("1")); code != 1 {
		t.Fatalf("first try: leaderrun exited %d, want the job's 1:\n%s", code, out)
	}
	// The retry of the same slot, under a new leadership.
	code, out := runOnce(t, "try2", args("2026-12-01"), env, job("0"))
	if code != 0 {
		t.Fatalf("retry: leaderrun exited %d, want 0:\n%s", code, out)
	}
	if !strings.Contains(out, "sent its message before") {
		t.Errorf("the retry did not say the message was sent before:\n%s", out)
	}
	// The next slot sends its own message.
	if code, out := runOnce(t, "next", args("2026-12-02"), env, job("0")); code != 0 {
		t.Fatalf("next slot: leaderrun exited %d, want 0:\n%s", code, out)
	}

	b, err := os.ReadFile(ids)
	if err != nil {
		t.Fatal(err)
	}
	runs := strings.Fields(string(b))
	if len(runs) != 3 || runs[0] != runs[1] || runs[1] == runs[2] {
		t.Fatalf("LEADER_RUN_ID of the tries and the next slot: %q, want the same id twice, then another", runs)
	}
	b, err = os.ReadFile(mbox)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "From leaderrun\n"); n != 2 {
		t.Errorf("the mailbox holds %d messages, want 2 (one per slot):\n%s", n, b)
	}
	for _, id := range []string{runs[0], runs[2]} {
		if n := strings.Count(string(b), "Message-ID: <"+id+"."); n != 1 {
			t.Errorf("the mailbox holds %d messages of run %s, want 1:\n%s", n, id, b)
		}
	}
}
