//go:build linux

package bench

import (
	"flag"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/chaos"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

var (
	flagFootprintOnly   = flag.String("bench.footprint-only", "", "measure only the footprint of leaderrun on this backend (local, etcd, consul, zookeeper, kubernetes, postgres, dynamodb), over -bench.footprint")
	flagFootprintTiming = flag.String("bench.footprint-timing", "test", "the timing of -bench.footprint-only: test (the suite's, a 3s TTL; 10s on Consul) or default (leaderrun's defaults: a 15s TTL renewed every 5s)")
)

// footprintDefaultTTL is leaderrun's default --ttl.
const footprintDefaultTTL = 15 * time.Second

// withDefaultTiming is c run with leaderrun's default timing: its argv
// without the suite's --ttl, --renew-interval, --kill-grace and
// --safety-margin.
func withDefaultTiming(c *Contender) *Contender {
	d := *c
	d.Config = "(" + c.Backend + ", default timing)"
	d.TTL = footprintDefaultTTL
	d.argv = func(e *Env, lock, id string, addrs []string) (string, []string) {
		exe, args := c.argv(e, lock, id, addrs)
		var out []string
		for i := 0; i < len(args); i++ {
			if slices.Contains([]string{"--ttl", "--renew-interval", "--kill-grace", "--safety-margin"}, args[i]) && i+1 < len(args) {
				i++
				continue
			}
			out = append(out, args[i])
		}
		return exe, out
	}
	return &d
}

// TestBenchFootprintOnly measures one leaderrun leader and standby while
// nothing happens, without the trials: the quick way to see what a change
// does to RSS, wake-ups and requests (docs/BENCHMARKS.md, "Where the memory
// and the wake-ups go"; the measurements: docs/results/). It runs only
// with -bench.footprint-only.
func TestBenchFootprintOnly(t *testing.T) {
	backend := *flagFootprintOnly
	if backend == "" {
		t.Skip("-bench.footprint-only not given")
	}
	var defaults bool
	switch *flagFootprintTiming {
	case "test":
	case "default":
		defaults = true
	default:
		t.Fatalf("-bench.footprint-timing=%s: test or default", *flagFootprintTiming)
	}
	var e *Env
	lr := &Contender{}
	switch backend {
	case "local":
		e = newEnv(t, 0, 0, 0, false)
		lr = localContender(filepath.Join(e.Dir, "locks"))
	case "zookeeper":
		e = newEnv(t, 0, 0, 0, false)
		// The suite's ensemble grants sessions of 4s at most; leaderrun's
		// default 15s TTL needs longer ones.
		e.ZooKeeper = chaos.ZooKeeper{ZooKeeper: testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 3, MaxSessionTimeout: 30 * time.Second})}
	default:
		e = backendEnv(t, backend, 3)
	}
	if backend != "local" {
		lr = contender(t, "leaderrun", backend, "")
	}
	if defaults {
		lr = withDefaultTiming(lr)
	}
	fp := e.Footprint(lr, *flagWindow)
	if fp.Err != "" {
		t.Fatalf("footprint: %s", fp.Err)
	}
	perMin := func(n int64) int64 { return n * int64(time.Minute) / int64(fp.Window) }
	mib := func(n int64) float64 { return float64(n) / (1 << 20) }
	share := func(d time.Duration) float64 { return 100 * float64(d) / float64(fp.Window) }
	t.Logf("%s over %v: RSS (anon) leader %.1f (%.1f) MiB, guard %.1f (%.1f) MiB, standby %.1f (%.1f) MiB; CPU leader %.2f%%, guard %.2f%%, standby %.2f%%; wake-ups/min leader %d, guard %d, standby %d (preempted/min %d, %d, %d); requests/min leader %d, standby %d",
		lr.Name(), fp.Window, mib(fp.LeaderRSS), mib(fp.LeaderAnon), mib(fp.GuardRSS), mib(fp.GuardAnon), mib(fp.StandbyRSS), mib(fp.StandbyAnon),
		share(fp.LeaderCPU), share(fp.GuardCPU), share(fp.StandbyCPU),
		perMin(fp.LeaderWakes), perMin(fp.GuardWakes), perMin(fp.StandbyWakes),
		perMin(fp.LeaderPreempts), perMin(fp.GuardPreempts), perMin(fp.StandbyPreempts), perMin(fp.LeaderReqs), perMin(fp.StandbyReqs))
}

// backendEnv starts backend's servers for t, a cluster of servers where
// the backend has one (etcd, Consul, ZooKeeper), else its one server.
func backendEnv(t *testing.T, backend string, servers int) *Env {
	t.Helper()
	var e *Env
	switch backend {
	case "etcd":
		e = newEnv(t, servers, 0, 0, false)
	case "consul":
		e = newEnv(t, 0, servers, 0, false)
	case "zookeeper":
		e = newEnv(t, 0, 0, servers, false)
	case "kubernetes":
		e = newEnv(t, 0, 0, 0, false)
		k := chaos.StartKube(t)
		e.Kube = &k
	case "postgres":
		e = newEnv(t, 0, 0, 0, false)
		pg := chaos.StartPostgres(t)
		e.Postgres = &pg
	case "dynamodb":
		e = newEnv(t, 0, 0, 0, false)
		d := chaos.StartDynamoDB(t)
		e.DynamoDB = &d
	default:
		t.Fatalf("%s: not a backend with a benchmark", backend)
	}
	return e
}
