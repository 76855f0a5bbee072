//go:build linux

package testcluster

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestPostgresPrimaryAndStandby(t *testing.T) {
	p := StartPostgres(t)
	p.Exec(t, "CREATE TABLE t (x int)")
	s := p.StartStandby(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range []struct {
		pg   *Postgres
		want bool
	}{{p, false}, {s, true}} {
		conn, err := pgx.Connect(ctx, c.pg.DSN())
		if err != nil {
			t.Fatal(err)
		}
		var rec bool
		if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&rec); err != nil || rec != c.want {
			t.Fatalf("%s: pg_is_in_recovery() = %v, %v; want %v", c.pg.Addr(), rec, err, c.want)
		}
		conn.Close(ctx)
	}
	p.Kill()
	p.Restart(t)
	p.Exec(t, "INSERT INTO t VALUES (1)")
}
