package postgres

import (
	"strings"
	"testing"

	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// TestReleaseWithoutNotify: a role that may UPDATE its lease row but not
// call pg_notify (EXECUTE revoked from PUBLIC, a hardened server; also any
// PostgreSQL-compatible server without NOTIFY) releases as before.
func TestReleaseWithoutNotify(t *testing.T) {
	pg := testcluster.StartPostgres(t)
	pg.Exec(t, `CREATE ROLE lrnonotify LOGIN`)
	pg.Exec(t, `CREATE SCHEMA lrn AUTHORIZATION lrnonotify`)
	pg.Exec(t, `REVOKE EXECUTE ON FUNCTION pg_notify(text, text) FROM PUBLIC`)
	dsn := strings.Replace(pg.DSN(), "postgres@", "lrnonotify@", 1)
	schema := func(c *Config) { c.Schema = "lrn" }
	key := lockertest.Key(t)
	a := newLocker(t, dsn, key, schema)
	// Twice: the first release finds the notice refused, the second
	// leaves it out from the start.
	for range 2 {
		ls := lockertest.MustAcquire(t, a)
		if err := ls.Release(ctx(t)); err != nil {
			t.Fatalf("Release: %v", err)
		}
		if h, err := a.Leader(ctx(t)); err == nil {
			t.Fatalf("after the release the row is still held by %q (epoch %d): a standby waits out TTL+allowance", h.ID, h.Epoch)
		}
	}
}
