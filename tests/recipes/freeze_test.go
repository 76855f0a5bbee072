//go:build linux

package recipes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leaderrun/leaderrun/tests/chaos"
	"github.com/leaderrun/leaderrun/tests/testcluster"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// host is one leaderrun whose job writes through examples/etcd-fence.sh
// in a loop, logging each attempt as "<epoch> <seq> ok|rejected|error".
type host struct {
	name string
	proc *chaos.Proc
	dir  string
}

func (h *host) file(name string) string { return filepath.Join(h.dir, name) }

// attempts are the host's logged write attempts.
func (h *host) attempts() []string {
	b, _ := os.ReadFile(h.file("attempts"))
	s := strings.TrimSpace(string(b))
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func (h *host) count(result string) int {
	n := 0
	for _, a := range h.attempts() {
		if strings.HasSuffix(a, " "+result) {
			n++
		}
	}
	return n
}

// startWriter starts leaderrun with args; its job runs init, then write
// (a shell command that sees the attempt's number in $i and exits 0 when
// the resource accepted the write, 1 when it rejected it) in a loop.
func startWriter(t *testing.T, name string, args []string, init, write string, env []string) *host {
	t.Helper()
	h := &host{name: name, dir: t.TempDir()}
	job := `echo $$ > ` + h.file("pid") + `
` + init + `
i=0
while :; do
	i=$((i + 1))
	rc=0
	{ ` + write + `
	} 2>/dev/null || rc=$?
	case $rc in 0) r=ok ;; 1) r=rejected ;; *) r=error ;; esac
	echo "$LEADER_EPOCH $i $r" >> ` + h.file("attempts") + `
done`
	p, err := chaos.Start(chaos.ProcSpec{
		Name: name, Path: bins.Leaderrun,
		Args:    append(append([]string{}, args...), "--id", name, "--", "sh", "-c", job),
		Env:     env,
		LogPath: h.file("log"),
	})
	if err != nil {
		t.Fatal(err)
	}
	h.proc = p
	t.Cleanup(func() {
		_ = syscall.Kill(-p.Pid(), syscall.SIGCONT)
		_ = p.Signal(syscall.SIGTERM)
		if _, ok := p.Wait(20 * time.Second); !ok {
			p.Kill()
		}
	})
	return h
}

// TestFrozenHostWritesThroughEtcdRecipe: the whole leader host (its
// leaderrun, its guard and its job) is frozen past its lease while the job
// writes through the etcd recipe. A standby takes over and writes; the old
// job wakes first, before its leaderrun and guard, and goes on writing as
// the stale leader it is. etcd's own history of the key must show no write
// of the old epoch after the new leader's first: 0 stale writes accepted.
func TestFrozenHostWritesThroughEtcdRecipe(t *testing.T) {
	e := testcluster.StartEtcd(t, 1)
	frozenHost(t, etcdArgs(e, "recipe-freeze"), etcdFenceInit, `etcd-fence.sh put /recipes/freeze "$LEADER_EPOCH $i"`,
		[]string{"PATH=" + jobPath(t, "etcdctl")},
		func(t *testing.T) []string { return etcdHistory(t, e, "/recipes/freeze") })
}

// frozenHost runs the frozen-host scenario: host a's job writes through a
// recipe, a's whole host freezes past its lease, b takes over and writes,
// a's job wakes first and writes as a stale leader, then the rest of a.
// history returns the resource's own record of accepted writes, in order,
// each starting with its epoch: no write of a's epoch may follow b's first.
func frozenHost(t *testing.T, args []string, init, write string, env []string, history func(t *testing.T) []string) {
	t.Helper()
	a := startWriter(t, "a", args, init, write, env)
	testsupport.WaitFor(t, 60*time.Second, "a's job to write", func() bool { return a.count("ok") >= 5 || a.proc.Exited() })
	if a.proc.Exited() {
		t.Fatalf("a exited %d:\n%s", a.proc.Code(), a.proc.Output(8<<10))
	}
	b := startWriter(t, "b", args, init, write, env)

	// Freeze host a: the job's group first, then its guard and leaderrun.
	pidText, err := os.ReadFile(a.file("pid"))
	if err != nil {
		t.Fatal(err)
	}
	job, _ := strconv.Atoi(strings.TrimSpace(string(pidText)))
	guard := 0
	for _, p := range chaos.Scan(bins.Guard) {
		if p.IsGuard() && p.PPid == a.proc.Pid() {
			guard = p.Pid
		}
	}
	if guard == 0 {
		t.Fatal("a leads without a dead-man guard")
	}
	_ = syscall.Kill(-job, syscall.SIGSTOP)
	_ = syscall.Kill(guard, syscall.SIGSTOP)
	_ = a.proc.Signal(syscall.SIGSTOP)
	frozen := time.Now()
	frozenAttempts := len(a.attempts())

	testsupport.WaitFor(t, 30*time.Second, "b to lead and write", func() bool { return b.count("ok") >= 5 })
	t.Logf("b wrote %v after a froze", time.Since(frozen).Round(time.Millisecond))

	// Wake a's job alone and let it write as a stale leader.
	_ = syscall.Kill(-job, syscall.SIGCONT)
	testsupport.WaitFor(t, 10*time.Second, "a's woken job to try to write", func() bool { return len(a.attempts()) >= frozenAttempts+3 })
	_ = syscall.Kill(guard, syscall.SIGCONT)
	_ = a.proc.Signal(syscall.SIGCONT)
	if code, ok := a.proc.Wait(20 * time.Second); !ok || code != 123 {
		t.Errorf("a's leaderrun after waking past its lease: exited %v with %d, want 123 (leadership lost)", ok, code)
	}
	after := a.attempts()[frozenAttempts:]
	testsupport.WaitFor(t, 10*time.Second, "b to write after a woke", func() bool { return b.count("ok") >= 10 })

	// The resource's own history: every accepted write, in order.
	accepted := history(t)
	epochA, epochB := epochOf(a.attempts()[0]), epochOf(b.attempts()[len(b.attempts())-1])
	stale, sawB := 0, false
	for _, v := range accepted {
		switch epochOf(v) {
		case epochB:
			sawB = true
		case epochA:
			if sawB {
				stale++
			}
		default:
			t.Errorf("a write of an unknown epoch: %q", v)
		}
	}
	var rejected, ok int
	for _, l := range after {
		switch {
		case strings.HasSuffix(l, " rejected"):
			rejected++
		case strings.HasSuffix(l, " ok"):
			ok++
		}
	}
	t.Logf("epochs a %s, b %s; %d writes accepted in all; the stale job tried %d writes after waking: %d rejected, %d accepted by its own account; %d stale writes in the resource's history",
		epochA, epochB, len(accepted), len(after), rejected, ok, stale)
	if !sawB {
		t.Fatalf("the resource's history has no write of b's epoch %s", epochB)
	}
	if stale != 0 {
		t.Errorf("%d writes of the stale epoch %s were accepted after epoch %s wrote", stale, epochA, epochB)
	}
	if rejected == 0 {
		t.Errorf("the woken job's writes were not seen rejected (attempts after waking: %q)", after)
	}
}

func epochOf(attempt string) string {
	f := strings.Fields(attempt)
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// etcdHistory is every value key was put with, oldest first, read back
// from etcd's own revisions.
func etcdHistory(t *testing.T, e *testcluster.Etcd, key string) []string {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cur, err := c.Get(ctx, key)
	if err != nil || len(cur.Kvs) == 0 {
		t.Fatalf("read %s: %v (%d keys)", key, err, len(cur.Kvs))
	}
	last := cur.Kvs[0].ModRevision
	var out []string
	for w := range c.Watch(ctx, key, clientv3.WithRev(1)) {
		if err := w.Err(); err != nil {
			t.Fatalf("watch %s: %v", key, err)
		}
		for _, ev := range w.Events {
			if ev.Type == clientv3.EventTypePut {
				out = append(out, string(ev.Kv.Value))
			}
			if ev.Kv.ModRevision >= last {
				return out
			}
		}
	}
	t.Fatal(fmt.Errorf("watch of %s ended before revision %d", key, last))
	return nil
}
