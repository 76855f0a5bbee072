package e2e

import (
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker/observe"
	"github.com/leaderrun/leaderrun/tests/chaos"
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
		px, err := chaos.NewProxy(pg.Addr(), chaos.Raw)
		if err != nil {
			t.Fatal(err)
		}
		defer px.Close()
		key := newKey("cut")
		dir := t.TempDir()
		a := startHost(t, dir, "a", "b", pgArgs(strings.Replace(dsn, pg.Addr(), px.Addr(), 1), key))
		a.waitStarted(t, 30*time.Second)
		b := startHost(t, dir, "b", "a", pgArgs(dsn, key))
		waitFor(t, 10*time.Second, "b to campaign", func() bool { return strings.Contains(b.p.Output(), "campaigning") })
		time.Sleep(time.Second)
		px.Cut(chaos.Blackhole)
		cut := time.Now()
		b.waitStarted(t, pgTTL+10*time.Second)
		// a's last successful renewal was sent before the cut, so its
		// deadline is at most cut + TTL, and the standby's count started
		// no earlier than a renew interval (500ms) before the cut.
		aEnd, bStart := a.stamp(t, "end"), b.stamp(t, "start")
		t.Logf("cut -> old child ended %v, new child started %v", aEnd.Sub(cut).Round(time.Millisecond), bStart.Sub(cut).Round(time.Millisecond))
		if aEnd.After(cut.Add(pgTTL)) {
			t.Errorf("old child ended %v after the cut, past its deadline (TTL %v)", aEnd.Sub(cut), pgTTL)
		}
		if min := pgTTL + observe.Allowance(pgTTL) - 500*time.Millisecond; bStart.Sub(cut) < min {
			t.Errorf("standby led %v after the cut, before TTL + allowance - renew interval (%v)", bStart.Sub(cut), min)
		}
		if !bStart.After(aEnd) {
			t.Errorf("standby's child started before the old child ended")
		}
		b.noOverlap(t)
		if eb, ea := b.epoch(t), a.epoch(t); eb <= ea {
			t.Errorf("epoch after takeover %d, want > %d", eb, ea)
		}
		if code := a.p.Wait(20 * time.Second); code != 123 {
			t.Errorf("cut-off leader exit %d, want 123\n%s", code, a.p.Output())
		}
		b.p.Signal(syscall.SIGTERM)
		b.p.Wait(10 * time.Second)
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
			dir := t.TempDir()
			start := time.Now()
			p := startCmd(t, append(pgArgs(tc.dsn, newKey("refused"), tc.extra...), "--", "touch", dir+"/ran"))
			code := p.Wait(tc.bound + 10*time.Second)
			took := time.Since(start)
			out := strings.TrimSpace(p.Output())
			var errLines []string
			for _, l := range strings.Split(out, "\n") {
				if strings.Contains(l, "[ERROR]") || strings.HasPrefix(l, "leaderrun:") {
					errLines = append(errLines, l)
				}
			}
			t.Logf("exit %d after %v: %s", code, took.Round(time.Millisecond), strings.Join(errLines, " | "))
			if code != 125 || len(errLines) != 1 || !strings.Contains(errLines[0], tc.want) {
				t.Fatalf("exit %d, want 125 and one error line naming %q:\n%s", code, tc.want, out)
			}
			if took > tc.bound {
				t.Errorf("took %v, want within %v", took, tc.bound)
			}
			if ranFile(dir) {
				t.Fatal("the child ran")
			}
		})
	}
}

func startCmd(t *testing.T, args []string) *Proc { return start(t, "refused", nil, args...) }

func ranFile(dir string) bool {
	_, err := exec.Command("test", "-e", dir+"/ran").CombinedOutput()
	return err == nil
}
