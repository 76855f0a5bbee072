package chaos

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/fence"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// TestEtcdLeaderRidesOutOneSilentMember: one of three etcd members stops
// answering the leader's host (its packets are dropped: a partition
// between that host and that member, or a member wedged without closing
// its connections), while the other two, a quorum, remain reachable and
// are listed in --etcd-endpoints. The README promises that the client fails
// over between the endpoints, so leaderrun should keep leading.
//
// With its default timeline (--ttl 15s) the stop point is 9s after the
// last successful renewal was sent, while the etcd client gives up a silent
// connection only after gRPC keep-alive notices (10s + 3s). So a renewal
// attempt must time out well before the stop point and be retried at once
// (supervise's renewTimeout: a tenth of the TTL), giving the client the
// chance to send the retry over another member's connection.
func TestEtcdLeaderRidesOutOneSilentMember(t *testing.T) {
	cl := StartEtcd(t, 3)
	f, err := fence.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	link, err := NewLink(cl, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer link.Close()
	dir := t.TempDir()
	own, err := bins.CopyTo(dir)
	if err != nil {
		t.Fatal(err)
	}
	// leaderrun's defaults: --ttl 15s, renew every 5s, kill grace 5s,
	// safety margin 1s.
	args := append(cl.LeaderrunArgs(link.Addrs()), "--key", "silent-member", "--id", "h0", "--log-level", "debug", "--", own.Writer)
	p, err := Start(ProcSpec{Name: "h0", Path: own.Leaderrun, Args: args, Env: f.Env("h0"), LogPath: filepath.Join(dir, "h0.log")})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = p.Signal(syscall.SIGTERM)
		if _, ok := p.Wait(30 * time.Second); !ok {
			p.Kill()
		}
	}()

	// Find the member the client talks to: the one whose proxy carries the
	// first renewal after leadership began.
	testsupport.WaitFor(t, time.Minute, "the child to write", func() bool {
		_, _, ok := f.LastAccepted()
		return ok
	})
	counts := func() []int64 {
		var out []int64
		for _, px := range link.Proxies {
			out = append(out, px.Requests())
		}
		return out
	}
	base := counts()
	used := -1
	testsupport.WaitFor(t, time.Minute, "a renewal through one of the proxies", func() bool {
		for i, n := range counts() {
			if n > base[i] {
				used = i
				return true
			}
		}
		return false
	})
	child := f.Instances()[0]

	// That member goes silent for twice the TTL; the other two stay.
	cut := fence.Now()
	link.Proxies[used].Cut(Blackhole)
	silent := 30 * time.Second
	deadline := time.Now().Add(silent)
	for time.Now().Before(deadline) && Alive(child.Pid) && !p.Exited() {
		time.Sleep(50 * time.Millisecond)
	}
	link.Proxies[used].Heal()
	if !Alive(child.Pid) || p.Exited() {
		var lines []string
		for _, line := range strings.Split(p.Output(64<<10), "\n") {
			if strings.Contains(line, "WARN") || strings.Contains(line, "stopping") {
				lines = append(lines, line)
			}
		}
		stopped := time.Duration(0)
		if c := f.Instances()[0].Closed; c != 0 {
			stopped = c.Sub(cut)
		}
		t.Errorf("member %d of 3 went silent, the other two reachable: leaderrun stopped its child %v later:\n%s",
			used, stopped.Round(time.Millisecond), strings.Join(lines, "\n"))
	}
}

// TestConsulStandbyWaitsForOldChildAfterClusterRestart: the whole Consul
// cluster restarts (all three servers crash and come back), and the server
// that the leading host talks to, as to its local agent, comes back last.
// The leader cannot renew meanwhile, but its child may run until its own
// deadline: that is safe only if nobody can take the lock before the TTL
// has passed since the leader's last renewal.
//
// Consul does not wait that long by itself. When the first two servers
// form a quorum again, the new Raft leader reaps the absent server's node
// from the catalog, and deregistering a node destroys every session created
// through it, TTL-only ones included (node deregistration ignores a
// session's checks). The key is released, and after the session's
// lock-delay a standby may acquire it. leaderrun's default lock-delay is
// therefore the TTL: the old leader's kill point comes before it ends.
// The chaos suite saw the overlap in 5 of 25 restart-backend runs with a
// 1s lock-delay; here it is made to happen every time.
func TestConsulStandbyWaitsForOldChildAfterClusterRestart(t *testing.T) {
	cl := StartConsul(t, 3)
	w := newWorld(t, cl, 1)
	// Host 2 talks to server 2; it leads, hosts 0 and 1 stand by.
	w.start(w.hosts[2])
	w.waitStable(0, time.Second, 2*time.Minute)
	w.start(w.hosts[0])
	w.start(w.hosts[1])
	w.waitStandbys()
	h, old := w.waitStable(0, 0, time.Minute)
	if h != w.hosts[2] {
		t.Fatalf("%s leads, want %s", h.id, w.hosts[2].id)
	}
	for i := 0; i < 3; i++ {
		cl.Kill(i)
	}
	cl.Restart(0)
	cl.Restart(1)
	// Server 2 stays down past the leader's deadline.
	deadline := time.Now().Add(cl.Timing().TTL + 5*time.Second)
	for time.Now().Before(deadline) && Alive(old.Pid) {
		time.Sleep(50 * time.Millisecond)
	}
	cl.Restart(2)
	w.waitStable(0, time.Second, 2*time.Minute)
	res := w.check.Feed(w.fence.Log(w.fed))
	w.fed += res.Writes
	for _, s := range res.Started {
		if s.PrevAlive() {
			t.Errorf("%s (epoch %d) started while the old leader's child %s (epoch %d) still ran (state %s), %v after it started",
				s.Name(), s.Epoch, old.Name(), old.Epoch, s.PrevState, s.Started.Sub(old.Started).Round(time.Millisecond))
		}
	}
	for _, o := range res.LiveOverlaps {
		t.Errorf("two children ran at once: %v", o)
	}
	if len(res.Overlaps) > 0 || res.StaleAccepted > 0 {
		t.Errorf("the fence accepted overlapping or stale writes: %+v", res)
	}
	t.Logf("stale writes rejected by the fence: %d", res.Stale)
	w.shutdown()
}
