//go:build linux

package testsupport

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// PTY is a pseudo-terminal pair. A process under test gets Slave as its
// standard streams and, started with Setsid and Setctty (Ctty 0), as its
// controlling terminal; the test types on the master with Type and reads
// what the terminal shows with Screen.
type PTY struct {
	Slave  *os.File
	master *os.File
	screen SyncBuffer
	done   chan struct{}
}

// OpenPTY opens a pseudo-terminal pair, closed at the end of the test.
func OpenPTY(t testing.TB) *PTY {
	t.Helper()
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open /dev/ptmx: %v", err)
	}
	master := os.NewFile(uintptr(fd), "/dev/ptmx")
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		master.Close()
		t.Fatalf("unlock the pty: %v", err)
	}
	n, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN)
	if err != nil {
		master.Close()
		t.Fatalf("pty number: %v", err)
	}
	slave, err := os.OpenFile("/dev/pts/"+strconv.FormatUint(uint64(n), 10), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		t.Fatalf("open the pty's slave: %v", err)
	}
	p := &PTY{Slave: slave, master: master, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			p.screen.Write(buf[:n])
			// EIO once no process holds the slave open any more.
			if err != nil && !errors.Is(err, syscall.EINTR) {
				return
			}
		}
	}()
	t.Cleanup(func() {
		slave.Close()
		master.Close()
		<-p.done
	})
	return p
}

// Type writes s on the master, as keys typed at the terminal: "\x03" is
// Ctrl-C, "\x1a" Ctrl-Z, "\n" Enter.
func (p *PTY) Type(t testing.TB, s string) {
	t.Helper()
	if _, err := p.master.WriteString(s); err != nil {
		t.Fatalf("type %q: %v", s, err)
	}
}

// Screen is everything the terminal displayed so far: the output of the
// processes on it and the echo of what was typed.
func (p *PTY) Screen() string { return p.screen.String() }

// ForegroundGroup is the foreground process group of pid's controlling
// terminal (tpgid in /proc/PID/stat), or -1 without one or without pid.
func ForegroundGroup(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	// After the command name: state ppid pgrp session tty_nr tpgid ...
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 6 {
		return -1
	}
	n, err := strconv.Atoi(f[5])
	if err != nil {
		return -1
	}
	return n
}
