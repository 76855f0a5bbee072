//go:build linux

package bench

import (
	"flag"
	"slices"
	"strings"
	"testing"
	"time"
)

var flagScaleOnly = flag.String("bench.scale-only", "", "run only leaderrun's scale rows on these backends (comma-separated: etcd, consul, zookeeper, kubernetes) at the -bench.scale sizes")

// TestBenchScale runs the scale section alone for the backends named by
// -bench.scale-only, with -bench.trials failovers per size (at most one
// fewer than the candidates): the rows that show whether a failover wakes
// one standby or all of them (docs/BENCHMARKS.md, "Scale").
func TestBenchScale(t *testing.T) {
	if *flagScaleOnly == "" {
		t.Skip("runs with -bench.scale-only=consul,kubernetes")
	}
	backends := strings.Split(*flagScaleOnly, ",")
	servers := func(name string) int {
		if slices.Contains(backends, name) {
			return 3
		}
		return 0
	}
	e := newEnv(t, servers("etcd"), servers("consul"), servers("zookeeper"), slices.Contains(backends, "kubernetes"))
	var cs []*Contender
	for _, c := range Contenders() {
		if c.Leaderrun && slices.Contains(backends, c.Backend) {
			cs = append(cs, c)
		}
	}
	res := NewResults(cs)
	for _, c := range cs {
		for _, n := range scaleSizes() {
			sp := e.Scale(c, n, 20*time.Second, *flagTrials)
			res.Scale[c.Name()] = append(res.Scale[c.Name()], sp)
			t.Logf("scale %s x%d: %+v", c.Name(), n, sp)
			if sp.Err != "" {
				t.Errorf("%s scale %d: %s", c.Name(), n, sp.Err)
			}
		}
	}
	t.Logf("\n%s", res.ScaleTable())
}
