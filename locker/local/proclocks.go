//go:build linux

package local

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/leaderrun/leaderrun/internal/retry"
)

// procLocks is the kernel's table of file locks.
const procLocks = "/proc/locks"

// lockLine is one granted lock as the kernel lists it, in /proc/locks or
// in a descriptor's /proc/self/fdinfo entry:
// "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"; a waiter has "->"
// after the number and is not a lock.
type lockLine struct {
	pid          int
	major, minor uint32
	ino          uint64
}

// parseLockLine reads an exclusive flock from the fields of one line, or
// reports false for anything else.
func parseLockLine(fields []string) (lockLine, bool) {
	if len(fields) < 4 || fields[3] != "WRITE" {
		return lockLine{}, false
	}
	return parseFlockLine(fields)
}

// parseFlockLine reads a granted flock, shared (READ) or exclusive, from
// the fields of one line, or reports false for anything else.
func parseFlockLine(fields []string) (lockLine, bool) {
	if len(fields) < 6 || fields[1] != "FLOCK" || fields[3] != "WRITE" && fields[3] != "READ" {
		return lockLine{}, false
	}
	parts := strings.Split(fields[5], ":")
	if len(parts) != 3 {
		return lockLine{}, false
	}
	ino, err := strconv.ParseUint(parts[2], 10, 64)
	if err != nil {
		return lockLine{}, false
	}
	major, err1 := strconv.ParseUint(parts[0], 16, 32)
	minor, err2 := strconv.ParseUint(parts[1], 16, 32)
	if err1 != nil || err2 != nil {
		return lockLine{}, false
	}
	pid, _ := strconv.Atoi(fields[4])
	return lockLine{pid: pid, major: uint32(major), minor: uint32(minor), ino: ino}, true
}

// names reports whether the lock is on the file st describes. The inode
// must match, and the device or the pid: a stacked file system may report
// another device than stat does. A lock matched by its pid alone must be a
// process of ours or root's: another user's process may have that pid
// (the record's holder gone, its pid recycled) and a file of the same
// inode number in a file system of its own (DESIGN §1.13).
func (ln lockLine) names(st *syscall.Stat_t, pid int) bool {
	if ln.ino != st.Ino {
		return false
	}
	if ln.major == unix.Major(uint64(st.Dev)) && ln.minor == unix.Minor(uint64(st.Dev)) {
		return true
	}
	return pid > 0 && ln.pid == pid && trustedProcess(pid)
}

// flocked reports whether an exclusive flock is held on the open file f,
// from the kernel's lock table, without locking anything; holderPID, from
// the holder record, matches a lock whose device is reported differently.
// With exactPID, only a lock taken by that process counts (the proof of
// last resort for a kernel that lists no locks per descriptor, below).
func flocked(f *os.File, holderPID int, exactPID bool) (bool, error) {
	fi, err := f.Stat()
	if err != nil {
		return false, fmt.Errorf("stat lock file: %w", err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	file, err := os.Open(procLocks)
	if err != nil {
		return false, fmt.Errorf("read %s: %w", procLocks, err)
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		ln, ok := parseLockLine(strings.Fields(sc.Text()))
		if ok && ln.names(st, holderPID) && (!exactPID || ln.pid == holderPID) {
			return true, nil
		}
	}
	if err := sc.Err(); err != nil {
		return false, fmt.Errorf("read %s: %w", procLocks, err)
	}
	return false, nil
}

// flockPIDs lists the processes the kernel's lock table names as holding
// an flock on the open file f (holderPID as for flocked): an exclusive
// one, or a shared one, which keeps every candidate out as well. A pid
// of 0 is a holder the kernel cannot name in our pid namespace, or one
// that died while a duplicate of its descriptor (the dead-man guard's)
// keeps the lock.
func flockPIDs(f *os.File, holderPID int) ([]int, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat lock file: %w", err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	b, err := os.ReadFile(procLocks)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", procLocks, err)
	}
	var pids []int
	for _, line := range strings.Split(string(b), "\n") {
		if ln, ok := parseFlockLine(strings.Fields(line)); ok && ln.names(st, holderPID) {
			pids = append(pids, ln.pid)
		}
	}
	return pids, nil
}

// innermostPID is the pid process pid (as our pid namespace names it) has
// in its own, innermost pid namespace (the last NSpid of its status), 0
// when that cannot be read. A leaderrun in a container writes that one
// into its record.
func innermostPID(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				return 0
			}
			n, _ := strconv.Atoi(f[len(f)-1])
			return n
		}
	}
	return 0
}

// ownsFlock reports whether the open file description behind fd holds an
// exclusive flock, from /proc/self/fdinfo/FD: the kernel lists there only
// the locks that this very open file owns (Linux 4.1 and later), not one
// that another open file of the same path holds. That is the proof Renew
// needs. An flock belongs to an open file, which the dead-man guard shares
// through its duplicate descriptor, and the guard's unlock drops it for
// ours too. The path then still names our file, and a fresh attempt to
// lock it fails as soon as a standby holds it: neither tells our lock from
// the standby's.
func ownsFlock(fd int) (bool, error) {
	if fd < 0 {
		return false, nil // closed: released
	}
	b, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(fd))
	if err != nil {
		return false, fmt.Errorf("read the lock descriptor's fdinfo: %w", err)
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte("lock:")); ok {
			if _, ok := parseLockLine(strings.Fields(string(rest))); ok {
				return true, nil
			}
		}
	}
	return false, nil
}

// waitReplacedHolders waits until no process holds an flock on an earlier
// file of path, one removed or replaced there by hand while it was locked.
// Its holder still runs its job: it finds the file gone only at its next
// renewal, then stops the job, and its lock goes when it and its guard
// close the file. Until then the flock just taken on the new file at the
// path is not leadership. Such a file is found through the kernel's lock
// table: a lock on another inode whose holder has a descriptor of that
// inode named "path (deleted)". (A holder that died leaves its lock to the
// guard, which kills the job at once; the table then names the dead pid,
// and nothing is waited for.)
//
// Only locks on the file system of our own lock are looked at, as the
// kernel's table names it (our descriptor's fdinfo: a stacked file system
// may report another device to stat): a file deleted from the lock
// directory was on that file system. Another process's locks elsewhere
// (a database's, on a busy host) would cost a read of every one of its
// descriptors on every failover: 1,400 of them, about 15ms, beside three
// ZooKeeper servers.
func waitReplacedHolders(ctx context.Context, f *os.File, path string) error {
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat lock file: %w", err)
	}
	own := ownLock{ino: fi.Sys().(*syscall.Stat_t).Ino}
	if ln, ok := fdLock(int(f.Fd())); ok {
		own.kernel, own.known = ln, true
	}
	for {
		if !replacedHeld(own, path+" (deleted)") {
			return nil
		}
		if !retry.Sleep(ctx, pollInterval) {
			return ctx.Err()
		}
	}
}

// replacedHeld reports whether some process of ours or root's holds an
// exclusive flock on an inode other than own through a descriptor named
// gone. Only such a process can have had our lock file (0600 in a 0700
// directory) open. Another user's cannot, but can name a file of its own
// so, in a mount namespace of its own (unshare -Urm, then a tmpfs mounted
// on the lock directory's path): counted, it would keep our new holder
// waiting for as long as that user liked.
func replacedHeld(own ownLock, gone string) bool {
	b, err := os.ReadFile(procLocks)
	if err != nil {
		return false
	}
	seen := map[int]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		ln, ok := parseLockLine(strings.Fields(line))
		if !ok || ln.ino == own.ino || ln.pid <= 0 || seen[ln.pid] {
			continue
		}
		if own.known && (ln.ino == own.kernel.ino || ln.major != own.kernel.major || ln.minor != own.kernel.minor) {
			continue
		}
		seen[ln.pid] = true
		if !trustedProcess(ln.pid) {
			continue
		}
		fdDir := "/proc/" + strconv.Itoa(ln.pid) + "/fd"
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue // gone, or another user's
		}
		for _, e := range fds {
			fdPath := fdDir + "/" + e.Name()
			if target, err := os.Readlink(fdPath); err != nil || target != gone {
				continue
			}
			var st syscall.Stat_t
			if syscall.Stat(fdPath, &st) == nil && lockedIno(b, st.Ino, ln.pid) {
				return true
			}
		}
	}
	return false
}

// ownLock is the lock just taken: its file's inode as stat reports it and,
// when known, the lock as the kernel's table lists it.
type ownLock struct {
	ino    uint64
	kernel lockLine
	known  bool
}

// fdLock is the exclusive flock the open file description behind fd holds,
// as /proc/self/fdinfo lists it (see ownsFlock).
func fdLock(fd int) (lockLine, bool) {
	b, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(fd))
	if err != nil {
		return lockLine{}, false
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte("lock:")); ok {
			if ln, ok := parseLockLine(strings.Fields(string(rest))); ok {
				return ln, true
			}
		}
	}
	return lockLine{}, false
}

// lockedIno reports whether the lock table b lists an exclusive flock of
// pid on inode ino.
func lockedIno(b []byte, ino uint64, pid int) bool {
	for _, line := range strings.Split(string(b), "\n") {
		if ln, ok := parseLockLine(strings.Fields(line)); ok && ln.ino == ino && ln.pid == pid {
			return true
		}
	}
	return false
}

// trustedProcess reports whether every user id of process pid (real,
// effective, saved, file system; as our user namespace names them, from
// its status) is ours or root's. The owner of /proc/PID is no proof: a
// process that made itself undumpable shows root's there.
func trustedProcess(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, "Uid:")
		if !ok {
			continue
		}
		ids := strings.Fields(rest)
		if len(ids) == 0 {
			return false
		}
		for _, id := range ids {
			n, err := strconv.ParseUint(id, 10, 32)
			if err != nil || !trustedUID(uint32(n)) {
				return false
			}
		}
		return true
	}
	return false
}
