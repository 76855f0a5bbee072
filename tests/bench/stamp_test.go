//go:build linux

package bench

import (
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/chaos"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

var (
	flagStamp         = flag.Int("bench.stamp", 0, "run only the stamp-child failover benchmark, this many crash and handoff trials per backend (make bench-stamp)")
	flagStampBackends = flag.String("bench.stamp-backends", stampDefaultBackends, "the backends of -bench.stamp (comma-separated: local, etcd, consul, zookeeper, kubernetes, postgres, dynamodb; empty: the default)")
)

// stampDefaultBackends are the backends -bench.stamp runs on by default.
const stampDefaultBackends = "local,etcd,consul,zookeeper"

// stampRival is the rival's figure, quoted beside ours.
const stampRival = "conch (etcd only; it cannot be built here, so the figure was measured elsewhere and is not reproduced by this run): " +
	"graceful handoff 7.7 ms median, p95 10.1 ms, on a single-member etcd, with a stamp child, on an idle 2-core machine of this kind"

// stampServers says what each backend's servers are.
var stampServers = map[string]string{
	"local":      "a lock directory",
	"etcd":       "etcd, 1 member",
	"consul":     "Consul, 1 server agent",
	"zookeeper":  "ZooKeeper, 1 standalone server",
	"kubernetes": "kube-apiserver on a 1-member etcd",
	"postgres":   "PostgreSQL, 1 server",
	"dynamodb":   "dynalite, 1 server",
}

// stampCluster starts backend's servers for t, one of each: the
// benchmark measures leaderrun, not a cluster's replication.
func stampCluster(t *testing.T, backend string) chaos.Cluster {
	t.Helper()
	switch backend {
	case "local":
		// Where root's leaderrun keeps them by default: the lock on
		// /run's tmpfs, the epoch's copy on disk.
		return chaos.StartLocalAsRoot(t)
	case "etcd":
		return chaos.StartEtcd(t, 1)
	case "consul":
		return chaos.StartConsul(t, 1)
	case "zookeeper":
		return chaos.StartZooKeeper(t, 1)
	case "kubernetes":
		return chaos.StartKube(t)
	case "postgres":
		return chaos.StartPostgres(t)
	case "dynamodb":
		return chaos.StartDynamoDB(t)
	}
	t.Fatalf("-bench.stamp-backends: %q is not a backend (local, etcd, consul, zookeeper, kubernetes, postgres, dynamodb)", backend)
	return nil
}

// runStamp runs n crash and n handoff trials on backend, its servers
// started for them alone, and adds them to set.
func runStamp(t *testing.T, set *StampSet, backend, stamp string, n int) {
	t.Helper()
	cl := stampCluster(t, backend)
	r := NewStampRig(cl, bins, stamp, t.TempDir())
	defer r.Close()
	for _, kind := range []string{KindCrash, KindGraceful} {
		var ts []StampTrial
		for i := 0; i < n; i++ {
			tr := r.Trial(kind)
			t.Logf("stamp %s %s: failover %v, steps %v %s", backend, kind, tr.Failover, tr.At, tr.Err)
			ts = append(ts, tr)
		}
		set.Add(r, kind, ts)
	}
}

// stampChild builds the stamp child or fails t.
func stampChild(t *testing.T) (path, how string) {
	t.Helper()
	path, how, err := testsupport.StampChild()
	if err != nil {
		t.Fatalf("stamp child: %v", err)
	}
	return path, how
}

// TestBenchStamp measures failovers as leaderrun's target states them:
// from just before kill(2) of the leader's leaderrun to the standby's
// stamp child's first instruction, on CLOCK_REALTIME; a leader and one
// standby on this host, talking to one server directly. It runs only with
// -bench.stamp=N (make bench-stamp); TestBenchSmoke covers its code on the
// local backend.
func TestBenchStamp(t *testing.T) {
	if *flagStamp <= 0 {
		t.Skip("runs with -bench.stamp=N (make bench-stamp)")
	}
	list := *flagStampBackends
	if list == "" {
		list = stampDefaultBackends
	}
	backends := strings.Split(list, ",")
	for _, be := range backends {
		if _, ok := stampServers[be]; !ok {
			t.Fatalf("-bench.stamp-backends: %q is not a backend (local, etcd, consul, zookeeper, kubernetes, postgres, dynamodb)", be)
		}
	}
	start, load0 := time.Now(), loadAvg()
	commit := chaos.Commit()
	stamp, how := stampChild(t)
	set := NewStampSet()
	for _, be := range backends {
		t.Run(be, func(t *testing.T) { runStamp(t, set, be, stamp, *flagStamp) })
	}
	load1 := loadAvg()

	var b strings.Builder
	cmd := *flagCommand
	if cmd == "" {
		cmd = fmt.Sprintf("go test ./tests/bench -run 'TestBenchStamp$' -v -args -bench.stamp=%d -bench.stamp-backends=%s", *flagStamp, list)
	}
	fmt.Fprintf(&b, "Run on %s; took %v.\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), time.Since(start).Round(time.Second))
	fmt.Fprintf(&b, "- command: `%s`\n", cmd)
	fmt.Fprintf(&b, "- tree: %s\n", commit)
	fmt.Fprintf(&b, "- machine: %s\n", chaos.Machine())
	fmt.Fprintf(&b, "- load average before / after: %s / %s\n", load0, load1)
	var servers []string
	for _, be := range set.Backends {
		servers = append(servers, fmt.Sprintf("%s: %s, `%s`", be, stampServers[be], set.Timing[be]))
	}
	fmt.Fprintf(&b, "- servers and leaderrun's timing (the suite's): %s; all on 127.0.0.1, no proxy\n", strings.Join(servers, "; "))
	fmt.Fprintf(&b, "- candidates: a leader and one standby leaderrun on one key, this host, `--log-format json --log-level debug`, "+
		"each running the stamp child directly (`leaderrun … -- stamp FILE`); the standby waited %v after saying it waits for the holder\n", stampSettle)
	fmt.Fprintf(&b, "- stamp child: %s\n", how)
	fmt.Fprintf(&b, "- trials: %d crash (SIGKILL) and %d handoff (SIGTERM) per backend\n", *flagStamp, *flagStamp)
	fmt.Fprintf(&b, "- rival: %s\n", stampRival)
	if errs := set.Errors(); len(errs) > 0 {
		fmt.Fprintf(&b, "- %d trials failed, e.g.: %s\n", len(errs), errs[0])
	}
	b.WriteString("\n### Failover to the stamp child\n\n" + set.Table())
	b.WriteString("\n### Where the time goes\n\nThe points the old leader (or its guard) and the standby logged, " +
		"from the clock reading before the kill (log timestamps have microseconds).\n\n" + set.Steps())
	t.Logf("\n%s", b.String())
	if *flagReport != "" {
		writeRun(t, "stamp", "`make bench-stamp`, "+strings.Join(backends, ", "), commit, b.String())
	}
}

// smokeStamp runs one crash and one handoff with the stamp child on the
// local backend, and checks what they must show: the standby's child
// stamped after the kill, and the old leader's child was gone.
func smokeStamp(t *testing.T) {
	t.Helper()
	stamp, _ := stampChild(t)
	set := NewStampSet()
	runStamp(t, set, "local", stamp, 1)
	for _, kind := range []string{KindCrash, KindGraceful} {
		ts := set.Trials["local"][kind]
		if len(ts) != 1 || ts[0].Err != "" || ts[0].Failover <= 0 {
			t.Errorf("stamp local %s: %+v", kind, ts)
			continue
		}
		if want := BreakdownSteps(kind)[0].Name; ts[0].At[want] <= 0 {
			t.Errorf("stamp local %s: the old side's first step %q not placed: %v", kind, want, ts[0].At)
		}
	}
	t.Logf("\n%s\n%s", set.Table(), set.Steps())
}
