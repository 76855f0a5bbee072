package e2e

import (
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// pgTTL and the timeline the PostgreSQL tests use: kill point = last
// renewal send + 2.5s; a standby takes a silent holder over after 3s +
// 250ms of seeing no change, reading the row every 300ms.
const pgTTL = 3 * time.Second

func pgArgs(dsn, key string, extra ...string) []string {
	args := []string{"--backend", "postgres", "--pg-dsn", dsn, "--key", key,
		"--ttl", "3s", "--renew-interval", "500ms", "--kill-grace", "1s", "--safety-margin", "500ms", "--log-level", "debug"}
	return append(args, extra...)
}

func TestPostgres(t *testing.T) {
	pg := testcluster.StartPostgres(t)
	dsn := pg.DSN()

	t.Run("kill -9 fails over through the guard", func(t *testing.T) {
		t.Parallel()
		// The guard is leaderrun itself, which frees the row once the
		// job is gone; the standby sees it at its next read.
		failoverAfterKill9Guarded(t, pgArgs(dsn, newKey("kill9")), 2*time.Second, false)
	})
	t.Run("graceful handoff", func(t *testing.T) {
		t.Parallel()
		gracefulHandoff(t, pgArgs(dsn, newKey("handoff")))
	})
	t.Run("frozen leader", func(t *testing.T) {
		t.Parallel()
		frozenLeader(t, pgArgs(dsn, newKey("frozen")), pgTTL+10*time.Second)
	})
	t.Run("leader cut off: its child dies within the TTL, the standby leads after TTL + allowance", func(t *testing.T) {
		t.Parallel()
		key := newKey("cut")
		_, b := cutOffLeader(t, t.TempDir(), pg.Addr(), func(px string) []string { return pgArgs(strings.Replace(dsn, pg.Addr(), px, 1), key) }, pgArgs(dsn, key), pgTTL, 500*time.Millisecond)
		stopHost(t, b)
	})
	t.Run("no-wait while held exits 124; status and check", func(t *testing.T) {
		t.Parallel()
		key := newKey("nowait")
		dir := t.TempDir()
		a := startHost(t, dir, "a", "b", pgArgs(dsn, key))
		a.waitStarted(t, 30*time.Second)
		p := start(t, "nowait", nil, append(pgArgs(dsn, key, "--no-wait"), "--", "touch", dir+"/ran")...)
		if code := p.Wait(15 * time.Second); code != 124 {
			t.Fatalf("exit %d, want 124\n%s", code, p.Output())
		}
		st := exec.Command(binary, "status", "--backend", "postgres", "--pg-dsn", dsn, "--key", key)
		out, err := st.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "a") {
			t.Fatalf("status: %v\n%s", err, out)
		}
		epoch := strconv.FormatUint(a.epoch(t), 10)
		ck := exec.Command(binary, "check", "--backend", "postgres", "--pg-dsn", dsn, "--key", key, "--epoch", epoch)
		if out, err := ck.CombinedOutput(); err != nil {
			t.Fatalf("check --epoch %s: %v\n%s", epoch, err, out)
		}
		a.p.Signal(syscall.SIGTERM)
		a.p.Wait(10 * time.Second)
	})

	// What cannot work gives one line and 125, and runs nothing.
	pg.Exec(t, `CREATE DATABASE lrreadonly`)
	pg.Exec(t, `ALTER DATABASE lrreadonly SET default_transaction_read_only = on`)
	standby := pg.StartStandby(t)
	base := strings.Replace(dsn, "/postgres?", "/%s?", 1)
	for _, tc := range []struct {
		name, dsn, want string
		bound           time.Duration
		extra           []string
	}{
		{"unreachable, no-wait", "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable", "127.0.0.1:1", 5 * time.Second, []string{"--no-wait", "--pg-connect-timeout", "1s"}},
		{"missing database", strings.Replace(base, "%s", "nosuchdb", 1), "--pg-dsn", 10 * time.Second, nil},
		{"read-only database", strings.Replace(base, "%s", "lrreadonly", 1), "--pg-dsn", 10 * time.Second, nil},
		{"standby server", standby.DSN(), "--pg-dsn", 10 * time.Second, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			refusedOneLine(t, pgArgs(tc.dsn, newKey("refused"), tc.extra...), nil, tc.want, tc.bound)
		})
	}
}

func ranFile(dir string) bool {
	_, err := exec.Command("test", "-e", dir+"/ran").CombinedOutput()
	return err == nil
}
