package bench

import (
	"flag"
	"testing"

	"github.com/leaderrun/leaderrun/tests/chaos"
)

var flagPG = flag.Bool("bench.pg", false, "measure leaderrun on PostgreSQL with the -bench.trials, -bench.loss-trials, -bench.footprint and -bench.scale sizes (default: one of each)")

// TestBenchPostgres measures leaderrun's PostgreSQL rows on one server,
// the single primary the backend supports (no PostgreSQL tool runs a
// command under a lock to set against it). By default it runs one trial of
// each kind, so the rows cannot rot; with -bench.pg it runs the
// benchmark's sizes, freezes included, and prints the tables (benchAlone).
func TestBenchPostgres(t *testing.T) {
	e := newEnv(t, 0, 0, 0, false)
	pg := chaos.StartPostgres(t)
	e.Postgres = &pg
	benchAlone(t, e, contender(t, "leaderrun", "postgres", ""), *flagPG)
}
