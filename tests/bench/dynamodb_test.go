//go:build linux

package bench

import (
	"flag"
	"testing"

	"github.com/leaderrun/leaderrun/tests/chaos"
)

var flagDyn = flag.Bool("bench.dynamodb", false, "measure leaderrun on DynamoDB (dynalite) with the -bench.trials, -bench.loss-trials, -bench.footprint and -bench.scale sizes (default: one of each)")

// TestBenchDynamoDB measures leaderrun's DynamoDB rows on one dynalite
// server (no DynamoDB tool runs a command under a lock to set against
// it): one trial of each kind by default, the benchmark's sizes with
// -bench.dynamodb (benchAlone).
func TestBenchDynamoDB(t *testing.T) {
	e := newEnv(t, 0, 0, 0, false)
	d := chaos.StartDynamoDB(t)
	e.DynamoDB = &d
	benchAlone(t, e, contender(t, "leaderrun", "dynamodb", ""), *flagDyn)
}
