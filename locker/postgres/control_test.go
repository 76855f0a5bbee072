package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// TestControlBackstop: a write that sends no notice (made by hand) is
// read within the backstop, and not by a read a second.
func TestControlBackstop(t *testing.T) {
	pg := testcluster.SharedPostgres(t)
	key := lockertest.Key(t)
	l, cs := countingLocker(t, pg.DSN(), key, func(s *store) { s.backstop = 2 * time.Second })
	if _, err := l.SetControl(ctx(t), locker.Control{}); err != nil {
		t.Fatal(err)
	}
	cs.reads.Store(0)
	done := waitControl(ctx(t), l, "1")
	time.Sleep(500 * time.Millisecond)
	wrote := time.Now()
	if _, err := sqlConn(t, pg.DSN()).Exec(ctx(t), `UPDATE public.leaderrun_leases_control SET version = 2 WHERE key = $1`, "lrtest/"+key); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(4 * time.Second):
		t.Fatal("a write without a notice was not read within the backstop")
	}
	if took, n := time.Since(wrote), cs.reads.Load(); took < time.Second || n > 3 {
		t.Fatalf("read %s after the write, in %d reads; want the backstop's 1.5s and at most 3 reads", took, n)
	}
}

// TestControlListenLost: when the server ends the listening connection,
// WaitControl listens again on a new one and reads the record, so a write
// made while it had none is not missed.
func TestControlListenLost(t *testing.T) {
	pg := testcluster.SharedPostgres(t)
	key := lockertest.Key(t)
	l, _ := countingLocker(t, pg.DSN(), key)
	writer := newLocker(t, pg.DSN(), key)
	sql := sqlConn(t, pg.DSN())
	done := waitControl(ctx(t), l, "")
	var pid int
	deadline := time.Now().Add(5 * time.Second)
	for pid == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		_ = sql.QueryRow(ctx(t), `SELECT pid FROM pg_stat_activity
WHERE application_name = 'leaderrun' AND query LIKE 'LISTEN %' LIMIT 1`).Scan(&pid)
	}
	if pid == 0 {
		t.Fatal("no connection is LISTENing")
	}
	if _, err := sql.Exec(ctx(t), `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	if _, err := writer.SetControl(ctx(t), locker.Control{Pause: &locker.Pause{By: "test", Reason: "lost"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WaitControl missed a write made after its listening connection was ended")
	}
}

// TestNotifyNames: the channel and payload stay within PostgreSQL's
// limits for the longest names.
func TestNotifyNames(t *testing.T) {
	long := strings.Repeat("a", 50)
	for _, c := range []struct{ schema, table, want string }{
		{"public", "leaderrun_leases", "public.leaderrun_leases_control"},
		{long, long, ""},
	} {
		ch := notifyChannel(c.schema, c.table)
		if len(ch) > maxChannel || (c.want != "" && ch != c.want) || ch == notifyChannel(c.schema, c.table+"x") {
			t.Errorf("notifyChannel(%q, %q) = %q", c.schema, c.table, ch)
		}
	}
	if p := notifyPayload("k/x"); p != "k/x" {
		t.Errorf("payload of a short key: %q", p)
	}
	if p := notifyPayload(strings.Repeat("k", 9000)); len(p) > maxPayload || p == notifyPayload(strings.Repeat("k", 9001)) {
		t.Errorf("payload of a long key: %q", p)
	}
}

// TestCloseDuringListen: Close does not wait for a WaitControl that holds
// a connection for its listen (the pool's Close waits for every
// connection taken out of it).
func TestCloseDuringListen(t *testing.T) {
	pg := testcluster.SharedPostgres(t)
	l, _ := countingLocker(t, pg.DSN(), lockertest.Key(t))
	wctx, cancel := context.WithCancel(ctx(t))
	defer cancel()
	done := waitControl(wctx, l, "")
	time.Sleep(500 * time.Millisecond) // listening by now
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	select {
	case <-closed:
	case <-time.After(3 * time.Second):
		cancel()
		<-closed
		t.Fatal("Close waited for the listening WaitControl")
	}
	cancel()
	<-done
}
