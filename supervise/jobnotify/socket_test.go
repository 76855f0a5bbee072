//go:build linux

package jobnotify

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

type received struct {
	m      Message
	ok     bool
	err    error
	parent int // the sender's parent, read while it waited
}

// serve receives on s until it is closed; accept takes senders whose
// parent is one of parents (the "job": what the shell started).
func serve(t *testing.T, s *Socket, jobs func() []int) <-chan received {
	t.Helper()
	out := make(chan received, 64)
	go func() {
		defer close(out)
		for {
			var parent int
			m, ok, err := s.Receive(func(pid, uid int) bool {
				parent = ppid(pid)
				for _, j := range jobs() {
					if pid == j || parent == j {
						return true
					}
				}
				return false
			})
			if err != nil && !errors.Is(err, ErrNoCredentials) {
				return
			}
			out <- received{m, ok, err, parent}
		}
	}()
	return out
}

func ppid(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

func next(t *testing.T, c <-chan received) received {
	t.Helper()
	select {
	case r, ok := <-c:
		if !ok {
			t.Fatal("the socket closed")
		}
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("no notification in 20s")
	}
	return received{}
}

// TestSystemdNotifyFromTheJob: systemd-notify, run by the job's shell,
// reaches the socket with its credentials; it waits on its barrier, so
// it is alive (and its parent known) while the sender is judged, and it
// exits once the barrier's descriptor is closed. A process outside the
// job is heard but not accepted.
func TestSystemdNotifyFromTheJob(t *testing.T) {
	if _, err := exec.LookPath("systemd-notify"); err != nil {
		t.Fatalf("needs systemd-notify (the systemd package): %v", err)
	}
	s, err := Listen("")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if st, err := os.Stat(s.dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("socket directory %v %v, want mode 0700", st.Mode(), err)
	}
	var job *exec.Cmd
	jobPid := make(chan int, 1)
	got := serve(t, s, func() []int {
		select {
		case p := <-jobPid:
			jobPid <- p
			return []int{p}
		default:
			return nil
		}
	})
	job = exec.Command("sh", "-c", `systemd-notify --ready --status="copying 3 of 7" && systemd-notify WATCHDOG=1 && sleep 1000`)
	job.Env = append(os.Environ(), "NOTIFY_SOCKET="+s.Path())
	if err := job.Start(); err != nil {
		t.Fatal(err)
	}
	jobPid <- job.Process.Pid
	defer func() { _ = job.Process.Kill(); _ = job.Wait() }()

	var ready, ping bool
	var status string
	for !ready || !ping {
		r := next(t, got)
		if r.err != nil {
			t.Fatalf("receive: %v", r.err)
		}
		if !r.ok {
			t.Fatalf("a message of the job's refused: %+v (sender's parent %d, job %d)", r.m, r.parent, job.Process.Pid)
		}
		if r.m.Ready {
			ready = true
			if r.m.Status != nil {
				status = *r.m.Status
			}
		}
		ping = ping || r.m.Ping
	}
	if status != "copying 3 of 7" {
		t.Errorf("status %q", status)
	}

	// Not of the job: its message is heard, and refused. (systemd-notify
	// run by root sends its parent's pid, this test's, in its
	// credentials, as only CAP_SYS_ADMIN may; another user's says its own.)
	other := exec.Command("systemd-notify", "WATCHDOG=1")
	other.Env = append(os.Environ(), "NOTIFY_SOCKET="+s.Path())
	done := make(chan error, 1)
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- other.Wait() }()
	for {
		r := next(t, got)
		if (r.m.Pid == other.Process.Pid || r.m.Pid == os.Getpid()) && r.m.Ping {
			if r.ok {
				t.Fatal("a process outside the job was accepted")
			}
			break
		}
	}
	// Its barrier answered (the descriptor closed), it exits.
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("systemd-notify still waits on its barrier")
	}
}

// TestAnotherUserCannotReachTheSocket: the socket's directory is 0700, so
// a process of another user cannot send to it at all.
func TestAnotherUserCannotReachTheSocket(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to act as another user")
	}
	s, err := Listen("")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := os.Chmod(s.Path(), 0o777); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("systemd-notify", "READY=1")
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+s.Path())
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("nobody reached the socket: %s", out)
	}
	// Nothing arrived.
	_ = s.conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	buf := make([]byte, 64)
	if n, _, err := s.conn.ReadFromUnix(buf); err == nil {
		t.Fatalf("received %q from nobody", buf[:n])
	} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("read: %v", err)
	}
}

// TestStaleDirectoriesAreSwept: a socket directory a dead leaderrun left
// is removed by the next Listen in the same place; a live one's is kept.
func TestStaleDirectoriesAreSwept(t *testing.T) {
	parent := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(parent, dirPrefix+strconv.Itoa(dead.Process.Pid)+"-x")
	live := filepath.Join(parent, dirPrefix+strconv.Itoa(os.Getppid())+"-y")
	for _, d := range []string{stale, live} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	s, err := Listen(parent)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the dead leaderrun's directory is still there: %v", err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("a live leaderrun's directory was removed: %v", err)
	}
}
