package fence

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leaderrun/leaderrun/tests/testsupport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// client speaks the protocol by hand.
type client struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, s *Server) *client {
	t.Helper()
	c, err := net.Dial(s.Network(), s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{t: t, c: c, r: bufio.NewReader(c)}
}

func (c *client) send(format string, args ...any) {
	c.t.Helper()
	if _, err := fmt.Fprintf(c.c, format+"\n", args...); err != nil {
		c.t.Fatal(err)
	}
}

func (c *client) recv() string {
	c.t.Helper()
	_ = c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := c.r.ReadString('\n')
	if err != nil {
		c.t.Fatal(err)
	}
	return strings.TrimSpace(line)
}

func listen(t *testing.T) *Server {
	t.Helper()
	s, err := Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// waitFor polls cond until it holds or 5s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testsupport.WaitFor(t, 5*time.Second, what, cond)
}

func TestServerRejectsLowerEpochs(t *testing.T) {
	s := listen(t)
	a, b := dial(t, s), dial(t, s)

	a.send("hello a 100 5 %d", Now())
	if got := a.recv(); got != "prev 0" {
		t.Fatalf("first hello: %q, want prev 0", got)
	}
	a.send("write 1")
	if got := a.recv(); got != "ok" {
		t.Fatalf("epoch 5 on a fresh fence: %q", got)
	}
	b.send("hello b 200 7 %d", Now())
	if got := b.recv(); got != "prev 100" {
		t.Fatalf("second hello: %q, want prev 100", got)
	}
	b.send("check 100 S")
	b.send("write 1")
	if got := b.recv(); got != "ok" {
		t.Fatalf("epoch 7 after 5: %q", got)
	}
	a.send("write 2")
	if got := a.recv(); got != "reject 7" {
		t.Fatalf("epoch 5 after 7: %q, want reject 7", got)
	}
	b.send("write 2")
	if got := b.recv(); got != "ok" {
		t.Fatalf("epoch 7 again: %q", got)
	}
	a.c.Close()
	waitFor(t, "a's end to be recorded", func() bool { return s.Instances()[0].Closed != 0 })

	l := s.Log(0)
	if len(l.Writes) != 4 {
		t.Fatalf("recorded %d writes, want 4", len(l.Writes))
	}
	want := []struct {
		inst     int
		epoch    uint64
		accepted bool
	}{{0, 5, true}, {1, 7, true}, {0, 5, false}, {1, 7, true}}
	for i, w := range want {
		got := l.Writes[i]
		if got.Instance != w.inst || got.Epoch != w.epoch || got.Accepted != w.accepted {
			t.Errorf("write %d = %+v, want instance %d epoch %d accepted %v", i, got, w.inst, w.epoch, w.accepted)
		}
		if i > 0 && got.At < l.Writes[i-1].At {
			t.Errorf("write %d recorded before write %d", i, i-1)
		}
	}
	if in := l.Instances[1]; in.Prev != 100 || in.PrevState != "S" || !in.PrevAlive() || in.Writer != "b" || in.Pid != 200 {
		t.Errorf("instance b = %+v", in)
	}
	if in := l.Instances[0]; in.Accepted != 1 || in.Rejected != 1 || in.Closed == 0 {
		t.Errorf("instance a = %+v", in)
	}
	if s.Highest() != 7 {
		t.Errorf("Highest() = %d, want 7", s.Highest())
	}
	if w, in, ok := s.LastAccepted(); !ok || in.Writer != "b" || w.Seq != 2 {
		t.Errorf("LastAccepted() = %+v, %+v, %v", w, in, ok)
	}
	if got := s.Log(3).Writes; len(got) != 1 || got[0].Seq != 2 {
		t.Errorf("Log(3) = %+v, want the last write only", got)
	}
}

func TestServerDropsProtocolViolations(t *testing.T) {
	s := listen(t)
	for _, bad := range []string{"write 1", "hello x", "hello a b c d", "bogus", ""} {
		c := dial(t, s)
		c.send("%s", bad)
		_ = c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.r.ReadString('\n'); err == nil {
			t.Errorf("%q: connection still answers", bad)
		}
	}
	if n := len(s.Instances()); n != 0 {
		t.Errorf("%d instances recorded from bad input", n)
	}
}

// mk builds a log from a compact description: instances with epochs, and
// writes as (instance, accepted) at 10ms steps.
func mk(epochs []uint64, writes [][2]int) Log {
	var l Log
	for i, e := range epochs {
		l.Instances = append(l.Instances, Instance{ID: i, Writer: fmt.Sprintf("h%d", i), Pid: 100 + i, Epoch: e})
	}
	for i, w := range writes {
		l.Writes = append(l.Writes, Write{Instance: w[0], Epoch: epochs[w[0]], At: Mono(i+1) * Mono(10*time.Millisecond), Accepted: w[1] == 1})
	}
	return l
}

func TestChecker(t *testing.T) {
	cases := []struct {
		name                                string
		epochs                              []uint64
		writes                              [][2]int
		overlaps, live, regress, stale, acc int
		shared                              int
	}{
		{name: "clean handoff", epochs: []uint64{5, 9}, writes: [][2]int{{0, 1}, {0, 1}, {1, 1}, {1, 1}}},
		{name: "stale writes rejected", epochs: []uint64{5, 9}, writes: [][2]int{{0, 1}, {1, 1}, {0, 0}, {0, 0}, {1, 1}}, live: 1, stale: 2},
		{name: "stale write accepted", epochs: []uint64{5, 9}, writes: [][2]int{{0, 1}, {1, 1}, {0, 1}}, overlaps: 1, live: 1, regress: 1, stale: 1, acc: 1},
		{name: "rivals without epochs interleave", epochs: []uint64{0, 0}, writes: [][2]int{{0, 1}, {1, 1}, {0, 1}, {1, 1}}, overlaps: 1, live: 1},
		{name: "one epoch, two processes", epochs: []uint64{4, 4}, writes: [][2]int{{0, 1}, {1, 1}}, shared: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := NewChecker().Feed(mk(c.epochs, c.writes))
			if len(r.Overlaps) != c.overlaps || len(r.LiveOverlaps) != c.live || r.Regressions != c.regress ||
				r.Stale != c.stale || r.StaleAccepted != c.acc || len(r.SharedEpochs) != c.shared {
				t.Errorf("got overlaps %d live %d regressions %d stale %d stale accepted %d shared %d\nwant %d %d %d %d %d %d",
					len(r.Overlaps), len(r.LiveOverlaps), r.Regressions, r.Stale, r.StaleAccepted, len(r.SharedEpochs),
					c.overlaps, c.live, c.regress, c.stale, c.acc, c.shared)
			}
		})
	}
}

func TestCheckerAcrossWindows(t *testing.T) {
	l := mk([]uint64{1, 2, 3}, [][2]int{{0, 1}, {0, 1}, {1, 1}, {1, 1}, {2, 1}, {0, 0}})
	c := NewChecker()
	first := l
	first.Writes = l.Writes[:3]
	if r := c.Feed(first); len(r.Overlaps)+len(r.LiveOverlaps) != 0 || r.Accepted != 3 || len(r.Started) != 3 {
		t.Fatalf("first window: %+v", r)
	}
	second := l
	second.Writes = l.Writes[3:]
	r := c.Feed(second)
	// Instance 0 finished in the first window; its late write is stale and
	// interleaves with the writers after it.
	if len(r.LiveOverlaps) != 1 || r.Stale != 1 || r.StaleAccepted != 0 || len(r.Overlaps) != 0 {
		t.Fatalf("second window: %+v", r)
	}
	if len(r.Started) != 0 {
		t.Errorf("second window reports %d new instances, want 0", len(r.Started))
	}
	// The gap counts from the last accepted write of the first window.
	if r.MaxGap != 10*time.Millisecond {
		t.Errorf("MaxGap = %v, want 10ms", r.MaxGap)
	}
}

func TestHandoffs(t *testing.T) {
	ins := []Instance{
		{Pid: 1, Closed: 100},
		{Pid: 2, Started: 150, PrevState: "gone", Closed: 300},
		{Pid: 3, Started: 250, PrevState: "R"},
	}
	h := Handoffs(ins)
	if len(h) != 2 {
		t.Fatalf("%d handoffs, want 2", len(h))
	}
	if h[0].Gap != 50 || h[0].FromAlive {
		t.Errorf("first handoff %+v, want gap 50ns, dead", h[0])
	}
	if h[1].Gap != -50 || !h[1].FromAlive {
		t.Errorf("second handoff %+v, want gap -50ns, alive", h[1])
	}
}

// TestWriterProgram builds the writer and runs two of them one after the
// other, as two leaders would.
func TestWriterProgram(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "writer")
	build := exec.Command("go", "build", "-o", bin, "./writer")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build writer: %v\n%s", err, out)
	}
	s := listen(t)
	start := func(name string, epoch string) *exec.Cmd {
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(), s.Env(name)...)
		if epoch != "" {
			cmd.Env = append(cmd.Env, "LEADER_EPOCH="+epoch)
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
		})
		return cmd
	}
	accepted := func(i int) int {
		in := s.Instances()
		if len(in) <= i {
			return 0
		}
		return in[i].Accepted
	}

	first := start("first", "")
	waitFor(t, "the first writer's writes", func() bool { return accepted(0) >= 3 })
	_ = first.Process.Kill()
	_ = first.Wait()
	second := start("second", "12")
	waitFor(t, "the second writer's writes", func() bool { return accepted(1) >= 3 })

	in := s.Instances()
	if in[0].Epoch != 0 || in[0].Writer != "first" || in[0].Pid != first.Process.Pid {
		t.Errorf("first instance %+v: want epoch 0 (no LEADER_EPOCH), writer first, pid %d", in[0], first.Process.Pid)
	}
	if in[1].Epoch != 12 || in[1].Prev != first.Process.Pid || in[1].PrevAlive() || in[1].PrevState == "" {
		t.Errorf("second instance %+v: want epoch 12, prev %d seen dead", in[1], first.Process.Pid)
	}
	if in[1].Started == 0 || in[1].Started > in[1].Hello {
		t.Errorf("second instance started at %d, hello at %d", in[1].Started, in[1].Hello)
	}
	h := Handoffs(in)
	if len(h) != 1 || h[0].Gap <= 0 || h[0].FromAlive {
		t.Errorf("handoff %+v: the second writer started after the first died", h)
	}
	r := NewChecker().Feed(s.Log(0))
	if len(r.Overlaps) != 0 || len(r.LiveOverlaps) != 0 || r.Rejected != 0 {
		t.Errorf("check: %+v", r)
	}
	_ = second.Process.Kill()
	_ = second.Wait()
}
