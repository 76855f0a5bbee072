//go:build linux

package guard

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/leaderrun/leaderrun/contain"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

func TestMain(m *testing.M) {
	// The guard's loop runs in the test process, which plays leaderrun:
	// the jobs are its children. Its own parent is the go command, whose
	// other children (test binaries of other packages) must not be taken
	// for a job's orphans and killed.
	supervisorPID = os.Getpid
	goleak.VerifyTestMain(m)
}

type nullLog struct{}

func (nullLog) Info(string, ...any)  {}
func (nullLog) Warn(string, ...any)  {}
func (nullLog) Error(string, ...any) {}

// job starts `sh -c 'sleep 1000 & wait'` as its own process group, marked
// as a job, and reaps it in the background.
func job(t *testing.T) Job {
	t.Helper()
	j := Job{Token: "t" + strings.ReplaceAll(t.Name(), "/", "_")}
	cmd := exec.Command("sh", "-c", "sleep 1000 & wait")
	cmd.Env = append(os.Environ(), contain.EnvMarker+"="+j.Token)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	j.Pgid, j.Since = cmd.Process.Pid, contain.StartTime(cmd.Process.Pid)
	t.Cleanup(func() { _ = syscall.Kill(-j.Pgid, syscall.SIGKILL); <-done })
	return j
}

func alive(j Job) bool { return contain.Attach("", j.Pgid, j.Token, j.Since).Alive() }

func waitGone(t *testing.T, j Job, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for alive(j) {
		if time.Now().After(deadline) {
			t.Fatalf("job %d still alive after %v", j.Pgid, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type run struct {
	w        *io.PipeWriter
	replies  *testsupport.SyncBuffer
	code     chan int
	released atomic.Value // the handle released, if any
}

func startGuard(t *testing.T) *run {
	t.Helper()
	r, w := io.Pipe()
	g := &run{w: w, code: make(chan int, 1), replies: &testsupport.SyncBuffer{}}
	release := func(_ context.Context, hello []byte, handle string) error {
		g.released.Store(string(hello) + "|" + handle)
		return nil
	}
	go func() { g.code <- Run(r, g.replies, release, nullLog{}) }()
	return g
}

func (g *run) send(t *testing.T, msg string) {
	t.Helper()
	if _, err := io.WriteString(g.w, msg); err != nil {
		t.Fatal(err)
	}
}

func (g *run) wait(t *testing.T) {
	t.Helper()
	defer g.w.Close() // as leaderrun closes the pipe after "done"
	select {
	case <-g.code:
	case <-time.After(10 * time.Second):
		t.Fatal("guard did not exit")
	}
}

// At the kill point the guard kills the job, and once it is gone releases
// the lease and says so: a standby need not wait for the lease to expire
// after a supervisor froze (DESIGN §1.9).
func TestKillPointKillsThenReleases(t *testing.T) {
	j := job(t)
	g := startGuard(t)
	at := MonoNow() + int64(200*time.Millisecond)
	g.send(t, Hello([]byte(`{}`))+Lease("h1")+Watch(at, j))
	waitGone(t, j, 5*time.Second)
	if MonoNow() < at {
		t.Fatal("job killed before its kill point")
	}
	deadline := time.Now().Add(5 * time.Second)
	for g.replies.String() != "fired\nreleased\n" {
		if time.Now().After(deadline) {
			t.Fatalf("no release reported; replies %q", g.replies.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if v, _ := g.released.Load().(string); v != "{}|h1" {
		t.Fatalf("released %q, want {}|h1", v)
	}
	g.send(t, Done())
	g.wait(t)
}

func TestExtendPostponesTheKill(t *testing.T) {
	j := job(t)
	g := startGuard(t)
	g.send(t, Watch(MonoNow()+int64(300*time.Millisecond), j))
	g.send(t, Extend(MonoNow()+int64(time.Hour)))
	time.Sleep(500 * time.Millisecond) // past the first kill point: nothing may happen
	if !alive(j) {
		t.Fatal("job killed although the kill point was extended")
	}
	g.send(t, Done())
	g.wait(t)
	if !alive(j) {
		t.Fatal("done must not kill the job")
	}
	if g.released.Load() != nil {
		t.Fatal("released although leaderrun said done")
	}
}

// An extension after a renewal that granted a shorter TTL moves the kill
// point earlier.
func TestExtendMayShortenTheKillPoint(t *testing.T) {
	j := job(t)
	g := startGuard(t)
	g.send(t, Watch(MonoNow()+int64(time.Hour), j))
	g.send(t, Extend(MonoNow()+int64(100*time.Millisecond)))
	waitGone(t, j, 5*time.Second)
	g.send(t, Done())
	g.wait(t)
}

func TestLeaderrunDeathKillsAndReleases(t *testing.T) {
	j := job(t)
	g := startGuard(t)
	g.send(t, Hello([]byte(`{"backend":"x"}`))+Lease("lease-7")+Watch(MonoNow()+int64(time.Hour), j))
	start := time.Now()
	_ = g.w.Close() // leaderrun died: end of input without "done"
	g.wait(t)
	waitGone(t, j, time.Second)
	if took := time.Since(start); took > time.Second {
		t.Fatalf("took %v to kill and release", took)
	}
	if v, _ := g.released.Load().(string); v != `{"backend":"x"}|lease-7` {
		t.Fatalf("released %q, want the hello payload and lease-7", v)
	}
}

// After "gone" the guard kills nothing: the job's group id may belong to a
// stranger by then.
func TestGoneForgetsTheJob(t *testing.T) {
	j := job(t)
	g := startGuard(t)
	g.send(t, Lease("h")+Watch(MonoNow()+int64(time.Hour), j)+Gone())
	_ = g.w.Close()
	g.wait(t)
	if !alive(j) {
		t.Fatal("the guard killed a job it was told is gone")
	}
	if g.released.Load() == nil {
		t.Fatal("lease not released after leaderrun died")
	}
}

// The guard keeps the lock descriptor it holds until the job is gone, then
// unlocks it: the flock outlives a dead leaderrun exactly that long.
func TestHeldLockUnlockedOnlyOnceTheJobIsGone(t *testing.T) {
	j := job(t)
	path := filepath.Join(t.TempDir(), "lock")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	dup, err := unix.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	f.Close() // leaderrun's own descriptor is gone; the dup holds the lock
	locked := func() bool {
		o, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close()
		if err := unix.Flock(int(o.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			return true
		}
		return false
	}
	if !locked() {
		t.Fatal("the held descriptor does not hold the lock")
	}
	g := startGuard(t)
	// A kill point far away: only leaderrun's death makes the guard act.
	g.send(t, Lease("h")+Hold(dup)+Watch(MonoNow()+int64(time.Hour), j))
	time.Sleep(100 * time.Millisecond)
	if !locked() {
		t.Fatal("lock dropped while the job runs")
	}
	_ = g.w.Close()
	g.wait(t)
	if alive(j) {
		t.Fatal("job alive after the guard finished")
	}
	if locked() {
		t.Fatal("lock still held after the job was gone and the guard finished")
	}
}

func TestMessagesRoundTrip(t *testing.T) {
	j := Job{Pgid: 42, Since: 7, Token: "tok", Cgroup: "/sys/fs/cgroup/x"}
	for _, msg := range []string{Watch(123, j), Watch(1, Job{Pgid: 9}), Extend(456), Lease("a b"), Hello([]byte(`{"k":1}`)), Hold(4), Gone(), Done()} {
		if !strings.HasSuffix(msg, "\n") || strings.Count(msg, "\n") != 1 {
			t.Errorf("message %q is not one line", msg)
		}
	}
	for _, in := range []Job{j, {Pgid: 9}} {
		_, rest, _ := strings.Cut(strings.TrimSuffix(Watch(123, in), "\n"), " ")
		at, got, err := parseWatch(rest)
		if err != nil || at != 123 || got != in {
			t.Errorf("parseWatch(Watch(%+v)) = %d, %+v, %v", in, at, got, err)
		}
	}
	hello, handle, err := ReadReleaseRequest(strings.NewReader(ReleaseRequest([]byte(`{"a":1}`), "h 1")))
	if err != nil || string(hello) != `{"a":1}` || handle != "h 1" {
		t.Errorf("release request round trip: %q %q %v", hello, handle, err)
	}
}

// When the kill point passes while leaderrun still runs (frozen or cut
// off), the guard kills the job and removes the job's cgroup, but not the
// cgroup leaderrun keeps its jobs under: leaderrun needs it for its next
// leadership. Here the test process plays leaderrun.
func TestKillPointKeepsLiveLeaderrunsCgroup(t *testing.T) {
	b, err := contain.Open(contain.Cgroup, contain.Options{})
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("open cgroup: %v", err)
		}
		t.Skipf("open cgroup: %v", err)
	}
	defer b.Close()
	cj, err := b.NewJob()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "1000")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cj.SysProcAttr(cmd.SysProcAttr)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cj.Started(cmd.Process.Pid)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	defer func() { _ = cj.Kill(); <-done }()
	parent := filepath.Dir(cj.Cgroup())
	if !strings.HasPrefix(filepath.Base(parent), "leaderrun.") {
		t.Fatalf("job cgroup %s is not under a leaderrun.PID cgroup", cj.Cgroup())
	}

	j := Job{Pgid: cj.Pgid(), Since: cj.Since(), Token: cj.Token(), Cgroup: cj.Cgroup()}
	g := startGuard(t)
	g.send(t, Hello([]byte(`{}`))+Lease("h1")+Watch(MonoNow()+int64(100*time.Millisecond), j))
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("job not killed 5s after the kill point")
	}
	deadline := time.Now().Add(5 * time.Second)
	for g.replies.String() != "fired\nreleased\n" {
		if time.Now().After(deadline) {
			t.Fatalf("no release reported; replies %q", g.replies.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := os.Stat(parent); err != nil {
		t.Errorf("the live leaderrun's cgroup was removed by its guard: %v", err)
	}
	// Removed after the release, which a standby's child waits for.
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(cj.Cgroup()); err != nil {
			break
		}
		if time.Now().After(end) {
			t.Errorf("the job's cgroup %s is still there 5s after the release", cj.Cgroup())
			break
		}
	}
	g.send(t, Done())
	g.wait(t)
}

// A local lock is released by unlocking the descriptor the guard holds, and
// that is the whole release: no releaser runs (the small guard's would be
// `leaderrun __release`, a process that can fail), and leaderrun is told
// "fired", then "released", at the kill point.
func TestHeldLockReleaseRunsNoReleaser(t *testing.T) {
	j := job(t)
	path := filepath.Join(t.TempDir(), "lock")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close() // leaderrun's descriptor: frozen, it keeps the file open
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	dup, err := unix.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	r, w := io.Pipe()
	g := &run{w: w, code: make(chan int, 1), replies: &testsupport.SyncBuffer{}}
	var called atomic.Bool
	release := func(context.Context, []byte, string) error {
		called.Store(true)
		return io.ErrUnexpectedEOF
	}
	go func() { g.code <- Run(r, g.replies, release, nullLog{}) }()
	g.send(t, Hello([]byte(`{"backend":"local"}`))+Lease(path)+Hold(dup)+Watch(MonoNow()+int64(200*time.Millisecond), j))
	waitGone(t, j, 5*time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for g.replies.String() != "fired\nreleased\n" {
		if time.Now().After(deadline) {
			t.Fatalf("no release reported; replies %q", g.replies.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if called.Load() {
		t.Error("the guard ran its releaser for a local lock")
	}
	o, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if err := unix.Flock(int(o.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatalf("the lock is still held after the guard released it: %v", err)
	}
	g.send(t, Done())
	g.wait(t)
}

// TestStderrLoggerTimestampsInLeaderrunsLayout: the small guard's lines
// carry hclog's timestamp and level, in text or JSON, one line a record.
func TestStderrLoggerTimestampsInLeaderrunsLayout(t *testing.T) {
	at := time.Date(2026, 12, 1, 11, 41, 56, 738123000, time.UTC)
	var text, js strings.Builder
	now := func() time.Time { return at }
	StderrLogger{Level: "info", Out: &text, Now: now}.Warn("killed the job", "processes", "123 (sleep)", "error", errors.New("a\nb"), "after", 1500*time.Millisecond)
	StderrLogger{Level: "info", Out: &text, Now: now}.Info("quiet", "k", "v")
	StderrLogger{Level: "warn", Out: &text, Now: now}.Info("not shown")
	want := "2026-12-01T11:41:56.738Z [WARN]  leaderrun.guard: killed the job: processes=\"123 (sleep)\" error=\"a; b\" after_s=1.5\n" +
		"2026-12-01T11:41:56.738Z [INFO]  leaderrun.guard: quiet: k=v\n"
	if text.String() != want {
		t.Fatalf("text:\n%q\nwant\n%q", text.String(), want)
	}
	StderrLogger{Level: "info", Format: "json", Out: &js, Now: now}.Error("release failed", "error", errors.New("x\ny"), "after", "leaderrun died")
	want = `{"@level":"error","@message":"release failed","@module":"leaderrun.guard","@timestamp":"2026-12-01T11:41:56.738123Z","after":"leaderrun died","error":"x; y"}` + "\n"
	if js.String() != want {
		t.Fatalf("json:\n%s\nwant\n%s", js.String(), want)
	}
}

// TestStderrLoggerLevels: the small guard logs at the level leaderrun
// passes it; at "off" (leaderrun --log-level off) nothing at all.
func TestStderrLoggerLevels(t *testing.T) {
	for _, tc := range []struct {
		level string
		want  []string
	}{
		{"debug", []string{"DEBUG", "INFO", "ERROR"}},
		{"info", []string{"INFO", "ERROR"}},
		{"error", []string{"ERROR"}},
		{"off", nil},
	} {
		var out strings.Builder
		l := StderrLogger{Level: tc.level, Out: &out}
		l.Debug("d")
		l.Info("i")
		l.Error("e")
		var got []string
		for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			if _, rest, ok := strings.Cut(line, "["); ok {
				lv, _, _ := strings.Cut(rest, "]")
				got = append(got, lv)
			}
		}
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("level %s logged %v, want %v", tc.level, got, tc.want)
		}
	}
}
