package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/chaos"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// bins are the binaries built for this test process.
var bins chaos.Binaries

func TestMain(m *testing.M) {
	code := chaos.RunTests(m, &bins)
	if k8slock.dir != "" {
		os.RemoveAll(k8slock.dir)
	}
	os.Exit(code)
}

// k8slock is the client-go leader-election wrapper (./k8slock), built the
// first time a test needs it: client-go's full client takes a while to
// build.
var k8slock struct {
	once      sync.Once
	dir, path string
	err       error
}

// buildK8sLock builds k8slock once per test binary and returns its path.
func buildK8sLock(t *testing.T) string {
	t.Helper()
	k8slock.once.Do(func() {
		if k8slock.dir, k8slock.err = os.MkdirTemp("", "leaderrun-bench-"); k8slock.err != nil {
			return
		}
		k8slock.path = filepath.Join(k8slock.dir, "k8slock")
		out, err := exec.Command("go", "build", "-o", k8slock.path, "github.com/leaderrun/leaderrun/tests/bench/k8slock").CombinedOutput()
		if err != nil {
			k8slock.err = fmt.Errorf("go build k8slock: %v\n%s", err, out)
		}
	})
	if k8slock.err != nil {
		t.Fatal(k8slock.err)
	}
	return k8slock.path
}

// newEnv starts the clusters the benchmark needs (0 servers: none); with
// kube, a kube-apiserver on an etcd member of its own, and k8slock.
func newEnv(t *testing.T, etcdServers, consulServers, zkServers int, kube bool) *Env {
	t.Helper()
	e := &Env{T: t, Bins: bins, Dir: t.TempDir()}
	exes := []string{bins.Leaderrun, bins.Writer, bins.Guard}
	if etcdServers > 0 {
		e.Etcdctl = testcluster.Bin(t, "etcdctl")
		e.Etcd = chaos.StartEtcd(t, etcdServers)
	}
	if consulServers > 0 {
		e.Consul = testcluster.Bin(t, "consul")
		e.ConsulCl = chaos.StartConsul(t, consulServers)
	}
	if zkServers > 0 {
		e.ZooKeeper = chaos.StartZooKeeper(t, zkServers)
	}
	if kube {
		e.K8sLock = buildK8sLock(t)
		exes = append(exes, e.K8sLock)
		k := chaos.StartKube(t)
		e.Kube = &k
	}
	t.Cleanup(func() {
		// Lanes close their own processes and wait for the guards; this
		// catches anything left.
		deadline := time.Now().Add(20 * time.Second)
		for len(chaos.Scan(exes...)) > 0 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		for _, p := range chaos.Scan(exes...) {
			t.Errorf("left running: %v", p)
			_ = syscall.Kill(p.Pid, syscall.SIGKILL)
		}
	})
	return e
}

// contender finds a contender by tool and backend (and config, if given).
func contender(t *testing.T, tool, backend, config string) *Contender {
	t.Helper()
	for _, c := range Contenders() {
		if c.Tool == tool && c.Backend == backend && (config == "" || c.Config == config) {
			return c
		}
	}
	t.Fatalf("no contender %s on %s %s", tool, backend, config)
	return nil
}

// TestBenchSmoke runs every part of the benchmark harness once, on a
// single etcd member, so that `make bench` cannot rot unnoticed. It asserts
// what leaderrun promises and what etcdctl lock is documented to do, never
// a timing.
func TestBenchSmoke(t *testing.T) {
	e := newEnv(t, 1, 0, 0, false)
	lr := contender(t, "leaderrun", "etcd", "")
	res := NewResults([]*Contender{lr})

	for _, kind := range []string{KindCrash, KindGraceful, KindRefuse} {
		ts := e.Trials(lr, kind, 1, 1)
		res.Add(lr, kind, ts)
		if len(ts) != 1 || ts[0].Err != "" {
			t.Fatalf("leaderrun %s trial: %+v", kind, ts)
		}
		tr := ts[0]
		if !tr.Handoff || tr.Failover <= 0 {
			t.Errorf("leaderrun %s: no handoff: %+v", kind, tr)
		}
		// The new child's own /proc check is the proof that the old one was
		// gone; Gap, stamped by the fence a little late, is only reported.
		if tr.OldAlive || tr.OldSurvived || tr.Overlaps > 0 {
			t.Errorf("leaderrun %s: the old child was not gone before the new one started: %+v", kind, tr)
		}
		t.Logf("leaderrun %s: failover %v, safety gap %v", kind, tr.Failover, tr.Gap)
		if kind == KindRefuse && (!tr.Stopped || !tr.HasRenewal || tr.Stop >= lr.TTL || tr.SinceRenewal >= lr.TTL) {
			t.Errorf("leaderrun cut off: the child must die on its own before the TTL: %+v", tr)
		}
	}

	// etcdctl lock starts its child without PDEATHSIG: after a crash the
	// child lives on, and runs next to the standby's once the lease expires.
	rival := contender(t, "etcdctl lock", "etcd", "(--ttl 3, matched)")
	res.Contenders = append(res.Contenders, rival)
	ts := e.Trials(rival, KindCrash, 1, 1)
	res.Add(rival, KindCrash, ts)
	if len(ts) != 1 || ts[0].Err != "" {
		t.Fatalf("etcdctl crash trial: %+v", ts)
	}
	// Whether the new child catches the old one in /proc at its own start
	// depends on scheduling; the overlapping writes are what matter.
	if tr := ts[0]; !tr.Handoff || !tr.OldSurvived || tr.Overlaps == 0 {
		t.Errorf("etcdctl lock crash: expected the orphaned child to overlap with the standby's: %+v", tr)
	}

	for _, c := range []*Contender{lr, rival} {
		fp := e.Footprint(c, 3*time.Second)
		res.Footprints[c.Name()] = fp
		if fp.Err != "" || fp.LeaderRSS == 0 || fp.StandbyRSS == 0 || fp.LeaderReqs == 0 || (c.Leaderrun && fp.GuardRSS == 0) {
			t.Errorf("footprint of %s: %+v", c.Name(), fp)
		}
	}
	sp := e.Scale(lr, 3, 2*time.Second, 1)
	res.Scale[lr.Name()] = append(res.Scale[lr.Name()], sp)
	if sp.Err != "" || len(sp.Failovers) != 1 || sp.Requests == 0 || sp.RSS == 0 {
		t.Errorf("scale: %+v", sp)
	}
	t.Logf("\n%s\n%s\n%s\n%s", res.FailoverTable(), res.LeaseLossTable(), res.FootprintTable(), res.ScaleTable())
	checkRatios(t, res)
	smokeBreakdown(t, e)
	smokeStepDown(t, e, lr)
	smokeStamp(t)
	if errs := res.Errors(); len(errs) > 0 {
		t.Errorf("errors: %v", errs)
	}
}

// scaleSizes reads -bench.scale: the candidate counts of the scale runs.
func scaleSizes() []int {
	var sizes []int
	for _, s := range strings.Split(*flagScale, ",") {
		var n int
		if _, err := fmt.Sscan(strings.TrimSpace(s), &n); err == nil && n > 0 {
			sizes = append(sizes, n)
		}
	}
	return sizes
}
