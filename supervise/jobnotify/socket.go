//go:build linux

package jobnotify

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// maxDatagram is the largest message read whole; systemd reads as much.
const maxDatagram = 4096

// maxFDs bounds the descriptors one datagram may pass (BARRIER=1 passes
// one); every one received is closed at once.
const maxFDs = 16

// Socket is the job's notify socket: a unixgram socket in a directory of
// its own, mode 0700, so that only leaderrun's user (the job's) and root
// can reach it. Its path goes to the job as NOTIFY_SOCKET.
type Socket struct {
	conn *net.UnixConn
	dir  string
	path string
}

// Listen makes the socket in a new directory under parent ("" for the
// system's temporary directory). Socket paths are short (108 bytes), so
// parent should be too.
func Listen(parent string) (*Socket, error) {
	sweepStale(parent)
	dir, err := os.MkdirTemp(parent, dirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return nil, fmt.Errorf("notify socket: %w", err)
	}
	// MkdirTemp makes it 0700 already; say so against a umask of 0.
	if err := os.Chmod(dir, 0o700); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("notify socket: %w", err)
	}
	path := filepath.Join(dir, "notify")
	if len(path) >= 108 {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("notify socket: path %s is longer than a socket's 107 bytes", path)
	}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("notify socket: %w", err)
	}
	raw, err := conn.SyscallConn()
	if err == nil {
		cerr := raw.Control(func(fd uintptr) {
			err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PASSCRED, 1)
		})
		err = errors.Join(cerr, err)
	}
	if err != nil {
		conn.Close()
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("notify socket: credentials: %w", err)
	}
	return &Socket{conn: conn, dir: dir, path: path}, nil
}

// dirPrefix begins the name of a socket's directory, followed by the pid
// of the leaderrun that made it.
const dirPrefix = "leaderrun-notify-"

// sweepStale removes the socket directories under parent that a dead
// leaderrun of this user left (a crash removes nothing): those named with
// a pid no process has, owned by this user. A pid reused since only
// leaves one behind, for the next sweep.
func sweepStale(parent string) {
	if parent == "" {
		parent = os.TempDir()
	}
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), dirPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pidText, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 || unix.Kill(pid, 0) != unix.ESRCH {
			continue
		}
		var st unix.Stat_t
		path := filepath.Join(parent, e.Name())
		if unix.Lstat(path, &st) != nil || int(st.Uid) != os.Geteuid() || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		_ = os.RemoveAll(path)
	}
}

// Path is the socket's path, the job's NOTIFY_SOCKET.
func (s *Socket) Path() string { return s.path }

// Close closes the socket and removes its directory. A Receive under way
// returns an error.
func (s *Socket) Close() error {
	err := s.conn.Close()
	return errors.Join(err, os.RemoveAll(s.dir))
}

// ErrNoCredentials is a datagram that came without its sender's
// credentials; it is dropped.
var ErrNoCredentials = errors.New("a notification without the sender's credentials")

// Receive waits for the next datagram and returns it parsed, with its
// sender's pid and uid. Descriptors passed with it (BARRIER=1) are closed
// before it returns, which is the answer a barrier waits for; the caller
// has judged nothing yet, so a sender that waits on its barrier is alive
// while the caller checks it: call accept before that, with the sender
// still waiting. A datagram without credentials gives ErrNoCredentials;
// one cut short (longer than 4096 bytes) is dropped the same way.
func (s *Socket) Receive(accept func(pid, uid int) bool) (Message, bool, error) {
	buf := make([]byte, maxDatagram)
	oob := make([]byte, unix.CmsgSpace(unix.SizeofUcred)+unix.CmsgSpace(4*maxFDs))
	n, oobn, flags, _, err := s.conn.ReadMsgUnix(buf, oob)
	if err != nil {
		return Message{}, false, err
	}
	cred, fds := parseControl(oob[:oobn])
	defer func() {
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
	}()
	if cred == nil {
		return Message{}, false, ErrNoCredentials
	}
	if flags&unix.MSG_TRUNC != 0 {
		return Message{Pid: int(cred.Pid), Uid: int(cred.Uid)}, false, fmt.Errorf("a notification longer than %d bytes from pid %d; dropped", maxDatagram, cred.Pid)
	}
	m := Parse(buf[:n])
	m.Pid, m.Uid = int(cred.Pid), int(cred.Uid)
	ok := accept == nil || accept(m.Pid, m.Uid)
	return m, ok, nil
}

// parseControl reads the sender's credentials and the descriptors passed.
func parseControl(b []byte) (*unix.Ucred, []int) {
	msgs, err := unix.ParseSocketControlMessage(b)
	if err != nil {
		return nil, nil
	}
	var cred *unix.Ucred
	var fds []int
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_SOCKET {
			continue
		}
		switch m.Header.Type {
		case unix.SCM_CREDENTIALS:
			if c, err := unix.ParseUnixCredentials(&m); err == nil {
				cred = c
			}
		case unix.SCM_RIGHTS:
			if r, err := unix.ParseUnixRights(&m); err == nil {
				fds = append(fds, r...)
			}
		}
	}
	return cred, fds
}
