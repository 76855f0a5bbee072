package postgres

import (
	"errors"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/leaserow/rowtest"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// handEdit is the SQL of each rowtest edit: plain statements that leave
// the version as it was.
var handEdit = map[string]string{
	rowtest.Delete:   `DELETE FROM public.leaderrun_leases WHERE key = $1`,
	rowtest.Empty:    `UPDATE public.leaderrun_leases SET term = '', holder = '' WHERE key = $1`,
	rowtest.LowerTTL: `UPDATE public.leaderrun_leases SET ttl_ms = 100 WHERE key = $1`,
	rowtest.ByHand:   `UPDATE public.leaderrun_leases SET ttl_ms = 100, version = 'by-hand' WHERE key = $1`,
}

// TestHandEdits: no hand edit of a held row lets a standby in before the
// holder's TTL (rowtest.HandEdits).
func TestHandEdits(t *testing.T) {
	pg := testcluster.SharedPostgres(t)
	rowtest.HandEdits(t, 2*time.Second, func(t *testing.T, key string, noWait bool) locker.Locker {
		return newLocker(t, pg.DSN(), key, func(c *Config) { c.NoWait = noWait })
	}, func(t *testing.T, key, kind string) {
		if _, err := sqlConn(t, pg.DSN()).Exec(ctx(t), handEdit[kind], "lrtest/"+key); err != nil {
			t.Fatal(err)
		}
	})
}

// TestStoreReleaseAndEdits: the lease-row stores' contract for hand
// edits (rowtest.StoreEdits); a deleted row's trace is the key's history.
func TestStoreReleaseAndEdits(t *testing.T) {
	pg := testcluster.SharedPostgres(t)
	key := lockertest.Key(t)
	st, err := newStore(Config{Options: locker.Options{Key: key, Prefix: "lrtest", TTL: time.Second}, DSN: pg.DSN(), ConnectTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c := sqlConn(t, pg.DSN())
	exec := func(t *testing.T, sql string) {
		if _, err := c.Exec(ctx(t), sql, "lrtest/"+key); err != nil {
			t.Fatal(err)
		}
	}
	set := map[string]string{rowtest.FieldTTL: `ttl_ms = 100`, rowtest.FieldTerm: `term = ''`, rowtest.FieldHolder: `holder = ''`,
		rowtest.FieldContract: `contract = ''`, rowtest.FieldEpoch: `epoch = epoch + 1`}
	rowtest.StoreEdits(t, st,
		func(t *testing.T, field string) {
			exec(t, `UPDATE public.leaderrun_leases SET `+set[field]+` WHERE key = $1`)
		},
		func(t *testing.T) { exec(t, `DELETE FROM public.leaderrun_leases WHERE key = $1`) },
		func(t *testing.T, epoch uint64) {
			if err := st.PutTerm(ctx(t), locker.Term{Epoch: epoch, ID: "a", Start: time.Now()}, 5); err != nil {
				t.Fatal(err)
			}
		})
}

// TestReleaseByHand: the release BACKENDS.md gives operators for a holder
// known to be gone frees the row as the holder's own release does (a
// single attempt takes it), and only at the epoch it names.
func TestReleaseByHand(t *testing.T) {
	pg := testcluster.SharedPostgres(t)
	key := lockertest.Key(t)
	held := lockertest.MustAcquire(t, newLocker(t, pg.DSN(), key))
	const byHand = `UPDATE leaderrun_leases
   SET term = '', holder = '', contract = 'released',
       version = md5(random()::text), renewed_at = now()
 WHERE key = $1 AND epoch = $2`
	c := sqlConn(t, pg.DSN())
	if tag, err := c.Exec(ctx(t), byHand, "lrtest/"+key, int64(held.Epoch())+1); err != nil || tag.RowsAffected() != 0 {
		t.Fatalf("the release by hand at another epoch: %v, %v rows", err, tag.RowsAffected())
	}
	if tag, err := c.Exec(ctx(t), byHand, "lrtest/"+key, int64(held.Epoch())); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("the release by hand: %v, %v rows", err, tag.RowsAffected())
	}
	next := lockertest.MustAcquire(t, newLocker(t, pg.DSN(), key, func(c *Config) { c.NoWait = true }))
	if next.Epoch() <= held.Epoch() {
		t.Fatalf("epoch %d after %d", next.Epoch(), held.Epoch())
	}
	// A row deleted already: the released row put back by hand.
	if _, err := c.Exec(ctx(t), `DELETE FROM leaderrun_leases WHERE key = $1`, "lrtest/"+key); err != nil {
		t.Fatal(err)
	}
	if err := st(t, pg.DSN(), key).PutTerm(ctx(t), locker.Term{Epoch: next.Epoch(), ID: "a", Start: time.Now()}, 5); err != nil {
		t.Fatal(err)
	}
	if _, err := newLocker(t, pg.DSN(), key, func(c *Config) { c.NoWait = true }).Acquire(ctx(t)); !errors.Is(err, locker.ErrHeld) {
		t.Fatalf("a single attempt on a deleted row with a history: %v, want ErrHeld", err)
	}
	if _, err := c.Exec(ctx(t), `INSERT INTO leaderrun_leases (key, term, holder, contract, ttl_ms, epoch, version, renewed_at)
VALUES ($1, '', '', 'released', 0, 0, md5(random()::text), now())`, "lrtest/"+key); err != nil {
		t.Fatal(err)
	}
	last := lockertest.MustAcquire(t, newLocker(t, pg.DSN(), key, func(c *Config) { c.NoWait = true }))
	if last.Epoch() <= next.Epoch() {
		t.Fatalf("epoch %d after %d", last.Epoch(), next.Epoch())
	}
}

// st is a bare Store for key, closed when the test ends.
func st(t *testing.T, dsn, key string) *store {
	s, err := newStore(Config{Options: locker.Options{Key: key, Prefix: "lrtest", TTL: time.Second}, DSN: dsn, ConnectTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
