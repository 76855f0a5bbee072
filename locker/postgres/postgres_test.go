package postgres

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/leaserow"
	"github.com/leaderrun/leaderrun/locker/leaserow/rowtest"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

func ctx(t *testing.T) context.Context { return lockertest.Ctx(t, 20*time.Second) }

// sqlConn is a superuser connection for poking at the table by hand.
func sqlConn(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(ctx(t), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// server is the lease-row contract's view of the shared server: plain
// SQL reads and edits of the row.
func server(t *testing.T) rowtest.Server {
	pg := testcluster.SharedPostgres(t)
	return rowtest.Server{
		Open: func(t *testing.T, key string, noWait bool) *leaserow.Locker {
			return newLocker(t, pg.DSN(), key, func(c *Config) { c.NoWait = noWait })
		},
		Row: func(t *testing.T, key string) rowtest.Stored {
			var r rowtest.Stored
			var epoch, ttl int64
			if err := sqlConn(t, pg.DSN()).QueryRow(ctx(t), `SELECT version, epoch, contract, ttl_ms FROM public.leaderrun_leases WHERE key = $1`,
				"lrtest/"+key).Scan(&r.Version, &epoch, &r.Contract, &ttl); err != nil {
				t.Fatal(err)
			}
			r.Epoch, r.TTL = uint64(epoch), time.Duration(ttl)*time.Millisecond
			return r
		},
		Edit: func(t *testing.T, key, kind string) {
			if _, err := sqlConn(t, pg.DSN()).Exec(ctx(t), handEdit[kind], "lrtest/"+key); err != nil {
				t.Fatal(err)
			}
		},
		Unreachable: func(t *testing.T, key string) *leaserow.Locker {
			return newLocker(t, "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable", key, func(c *Config) { c.NoWait = true })
		},
		UnreachableAddr: "127.0.0.1:1",
	}
}

// TestLeaseRowContract: the lease-row backends' scenarios on the real
// server (rowtest.ServerContract).
func TestLeaseRowContract(t *testing.T) {
	rowtest.ServerContract(t, server(t))
}

// TestLockContract: the core lock contract (lockertest.LockContract) on
// PostgreSQL; the hand delete is a plain SQL DELETE of the row.
func TestLockContract(t *testing.T) {
	lockertest.LockContract(t, server(t).Lock())
}

// attempt builds a Locker for dsn and acquires once: the error of New,
// else Acquire's.
func attempt(t *testing.T, dsn string, mods ...func(*Config)) error {
	cfg := Config{Options: locker.Options{Key: lockertest.Key(t), ID: "x", TTL: 2 * time.Second, NoWait: true}, DSN: dsn, ConnectTimeout: 2 * time.Second}
	for _, m := range mods {
		m(&cfg)
	}
	l, err := New(cfg)
	if err != nil {
		return err
	}
	defer l.Close()
	_, err = l.Acquire(ctx(t))
	return err
}

func TestStandbyServerIsRefused(t *testing.T) {
	pg := testcluster.StartPostgres(t)
	sb := pg.StartStandby(t)
	for _, ro := range []bool{false, true} {
		err := attempt(t, sb.DSN(), func(c *Config) { c.ReadOnly = ro })
		var ce *locker.ConfigError
		if !errors.As(err, &ce) || ce.Field != "DSN" || !strings.Contains(err.Error(), "standby") || strings.Contains(err.Error(), "\n") {
			t.Fatalf("a Locker on a standby (read-only %v): %v, want a one-line ConfigError on DSN", ro, err)
		}
		t.Log(err)
	}
}

// TestRefusals: what retrying cannot fix is ErrRefused, in one line.
func TestRefusals(t *testing.T) {
	pg := testcluster.SharedPostgres(t)
	pg.Exec(t, `DO $$ BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'lrreadonly') THEN
		PERFORM 1;
	END IF;
END $$`)
	c := sqlConn(t, pg.DSN())
	var n int
	_ = c.QueryRow(ctx(t), `SELECT count(*) FROM pg_database WHERE datname = 'lrreadonly'`).Scan(&n)
	if n == 0 {
		pg.Exec(t, `CREATE DATABASE lrreadonly`)
		pg.Exec(t, `ALTER DATABASE lrreadonly SET default_transaction_read_only = on`)
		pg.Exec(t, `CREATE ROLE lrweak LOGIN`)
	}
	base := strings.Replace(pg.DSN(), "/postgres?", "/%s?", 1)
	cases := []struct{ name, dsn, want string }{
		{"missing database", strings.Replace(base, "%s", "nosuchdb", 1), "does not exist"},
		{"read-only database", strings.Replace(base, "%s", "lrreadonly", 1), "read-only"},
		{"no privilege to create", strings.Replace(strings.Replace(base, "%s", "postgres", 1), "postgres@", "lrweak@", 1), "examples/postgres.sql"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := attempt(t, tc.dsn, func(c *Config) { c.Schema = "lrweak_schema" })
			if !errors.Is(err, locker.ErrRefused) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("Acquire: %v, want a one-line refusal saying %q", err, tc.want)
			}
			t.Log(err)
		})
	}
	t.Run("bad DSN", func(t *testing.T) {
		_, err := New(Config{Options: locker.Options{Key: "k", TTL: time.Second}, DSN: "host=a port=notanumber"})
		var ce *locker.ConfigError
		if !errors.As(err, &ce) || ce.Field != "DSN" {
			t.Fatalf("New: %v, want a ConfigError on DSN", err)
		}
	})
}

// TestLatency logs how long acquire and renew take on the local server.
func TestLatency(t *testing.T) {
	pg := testcluster.SharedPostgres(t)
	l := newLocker(t, pg.DSN(), lockertest.Key(t))
	acq, ren := lockertest.Cycles(t, l, 20, 10)
	am, a99 := lockertest.Median(acq)
	rm, r99 := lockertest.Median(ren)
	t.Logf("acquire (read + conditional write): median %v, p99 %v; renew: median %v, p99 %v", am, a99, rm, r99)
}

// TestExampleSQLWithLeastPrivilege: the tables made by examples/postgres.sql
// and a role with only the grants it lists are enough for every call, and
// leaderrun then creates nothing.
func TestExampleSQLWithLeastPrivilege(t *testing.T) {
	pg := testcluster.StartPostgres(t)
	sql, err := os.ReadFile("../../examples/postgres.sql")
	if err != nil {
		t.Fatal(err)
	}
	script := strings.ReplaceAll(string(sql), `"public"`, `"jobs"`)
	var grants []string
	for _, line := range strings.Split(script, "\n") {
		if g, ok := strings.CutPrefix(line, "-- GRANT "); ok {
			grants = append(grants, "GRANT "+strings.ReplaceAll(g, "leaderrun_role", "lrmin"))
		}
	}
	if len(grants) != 6 {
		t.Fatalf("examples/postgres.sql lists %d grants, want 6", len(grants))
	}
	pg.Exec(t, `CREATE SCHEMA jobs`)
	pg.Exec(t, script)
	pg.Exec(t, `CREATE ROLE lrmin LOGIN`)
	pg.Exec(t, `REVOKE CREATE ON SCHEMA public FROM PUBLIC`)
	for _, g := range grants {
		pg.Exec(t, g)
	}
	dsn := strings.Replace(pg.DSN(), "postgres@", "lrmin@", 1)
	schema := func(c *Config) { c.Schema = "jobs" }
	a := newLocker(t, dsn, lockertest.Key(t), schema)
	ls := lockertest.MustAcquire(t, a)
	if _, err := ls.Renew(ctx(t)); err != nil {
		t.Fatal(err)
	}
	run := locker.NewRun(locker.Options{ID: "a"}, "s1", locker.RunSucceeded, ls.Epoch(), time.Hour)
	if err := a.RecordRun(ctx(t), ls, run); err != nil {
		t.Fatal(err)
	}
	if _, err := a.LookupRun(ctx(t), "s1"); err != nil {
		t.Fatal(err)
	}
	if err := ls.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := a.RecordTerm(ctx(t), locker.Term{Epoch: ls.Epoch(), ID: "a"}, 2); err != nil {
		t.Fatalf("RecordTerm: %v", err)
	}
	if terms, err := a.Terms(ctx(t), 0); err != nil || len(terms) != 1 {
		t.Fatalf("Terms = %+v, %v", terms, err)
	}
	cv, err := a.SetControl(ctx(t), locker.Control{Pause: &locker.Pause{By: "ops@h", Reason: "r"}})
	if err != nil {
		t.Fatalf("SetControl: %v", err)
	}
	if c, err := a.Control(ctx(t)); err != nil || c.Version != cv || !c.Paused() {
		t.Fatalf("Control = %+v, %v", c, err)
	}
	b := newLocker(t, dsn, lockertest.Key(t), schema)
	lb := lockertest.MustAcquire(t, b)
	if lb.Epoch() <= ls.Epoch() {
		t.Fatalf("epoch %d after %d", lb.Epoch(), ls.Epoch())
	}

	// Tables made before the history and the control records existed,
	// and a role that may not create them: leading works as before, no
	// control record is read, and only history and writing a control
	// record are refused, in one line naming the DDL.
	legacy := regexp.MustCompile(`(?s)CREATE TABLE IF NOT EXISTS "old"\."leaderrun_leases_(terms|control)" \(.*?\);`)
	old := strings.ReplaceAll(string(sql), `"public"`, `"old"`)
	if n := len(legacy.FindAllString(old, -1)); n != 2 {
		t.Fatalf("examples/postgres.sql has %d of the terms and control tables, want 2", n)
	}
	pg.Exec(t, `CREATE SCHEMA old`)
	pg.Exec(t, legacy.ReplaceAllString(old, ""))
	for _, g := range grants[:4] {
		pg.Exec(t, strings.ReplaceAll(g, `"jobs"`, `"old"`))
	}
	c := newLocker(t, dsn, lockertest.Key(t), func(c *Config) { c.Schema = "old" })
	lc := lockertest.MustAcquire(t, c)
	if _, err := lc.Renew(ctx(t)); err != nil {
		t.Fatalf("Renew without a terms table: %v", err)
	}
	err = c.RecordTerm(ctx(t), locker.Term{Epoch: lc.Epoch(), ID: "c"}, 2)
	if !errors.Is(err, locker.ErrRefused) || !strings.Contains(err.Error(), "examples/postgres.sql") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("RecordTerm without a terms table = %v, want a one-line refusal naming examples/postgres.sql", err)
	}
	for range 2 {
		if rec, err := c.Control(ctx(t)); err != nil || rec.Version != "" {
			t.Fatalf("Control without a control table = %+v, %v; want the empty record", rec, err)
		}
	}
	_, err = c.SetControl(ctx(t), locker.Control{})
	if !errors.Is(err, locker.ErrRefused) || !strings.Contains(err.Error(), "examples/postgres.sql") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("SetControl without a control table = %v, want a one-line refusal naming examples/postgres.sql", err)
	}
	if _, err := lc.Renew(ctx(t)); err != nil {
		t.Fatalf("Renew after the refused control write: %v", err)
	}
	ro := newLocker(t, dsn, lockertest.Key(t), func(c *Config) { c.Schema, c.ReadOnly = "old", true })
	if rec, err := ro.Control(ctx(t)); err != nil || rec.Version != "" {
		t.Fatalf("read-only Control without a control table = %+v, %v; want the empty record", rec, err)
	}
	if terms, err := ro.Terms(ctx(t), 0); err != nil || len(terms) != 0 {
		t.Fatalf("read-only Terms without a terms table = %+v, %v; want none", terms, err)
	}
	if err := lc.Release(ctx(t)); err != nil {
		t.Fatalf("Release without a terms table: %v", err)
	}
}

// TestServerRestartUnderTheLeader: renewals fail while the server is down
// (not a loss), and the first one after it is back succeeds on the row
// the server kept: the pool makes new connections by itself.
func TestServerRestartUnderTheLeader(t *testing.T) {
	pg := testcluster.StartPostgres(t)
	l := newLocker(t, pg.DSN(), lockertest.Key(t), func(c *Config) { c.TTL = 10 * time.Second })
	ls := lockertest.MustAcquire(t, l)
	pg.Kill()
	rctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_, err := ls.Renew(rctx)
	cancel()
	if err == nil || errors.Is(err, locker.ErrLost) {
		t.Fatalf("Renew while the server is down: %v, want a failed attempt", err)
	}
	pg.Restart(t)
	if _, err := ls.Renew(ctx(t)); err != nil {
		t.Fatalf("Renew after the restart: %v", err)
	}
	if h, err := l.Leader(ctx(t)); err != nil || h.Epoch != ls.Epoch() {
		t.Fatalf("Leader after the restart = %+v, %v", h, err)
	}
}

// TestControlApart: the control row is the key's, in a table of its own,
// and changes nothing the lease table answers; a holder's priority
// survives the holder column.
func TestControlApart(t *testing.T) {
	pg := testcluster.SharedPostgres(t)
	lockertest.ControlApart(t, func(t *testing.T, key string) locker.Locker {
		return newLocker(t, pg.DSN(), key, func(c *Config) { c.Priority = 7 })
	}, 7)
	var n int
	err := sqlConn(t, pg.DSN()).QueryRow(ctx(t), `SELECT count(*) FROM public.leaderrun_leases_control WHERE key = $1`,
		"lrtest/"+lockertest.Key(t)).Scan(&n)
	if err != nil || n != 1 {
		t.Fatalf("control rows of the key: %d, %v; want 1", n, err)
	}
}
