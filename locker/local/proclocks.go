//go:build linux

package local

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// procLocks is the kernel's table of file locks.
const procLocks = "/proc/locks"

// flocked reports whether an exclusive flock is held on the open file f,
// from the kernel's lock table, without locking anything. A lock line
// names the file as MAJOR:MINOR:INODE (hex:hex:decimal). The inode must
// match, and the device or the holder pid from the holder record: a stacked
// file system may report another device than stat does.
func flocked(f *os.File, holderPID int) (bool, error) {
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
		fields := strings.Fields(sc.Text())
		// "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"; waiters have "->".
		if len(fields) < 6 || fields[1] != "FLOCK" || fields[3] != "WRITE" {
			continue
		}
		parts := strings.Split(fields[5], ":")
		if len(parts) != 3 {
			continue
		}
		ino, err := strconv.ParseUint(parts[2], 10, 64)
		if err != nil || ino != st.Ino {
			continue
		}
		major, err1 := strconv.ParseUint(parts[0], 16, 32)
		minor, err2 := strconv.ParseUint(parts[1], 16, 32)
		pid, _ := strconv.Atoi(fields[4])
		sameDev := err1 == nil && err2 == nil &&
			uint32(major) == unix.Major(uint64(st.Dev)) && uint32(minor) == unix.Minor(uint64(st.Dev))
		if sameDev || (holderPID > 0 && pid == holderPID) {
			return true, nil
		}
	}
	if err := sc.Err(); err != nil {
		return false, fmt.Errorf("read %s: %w", procLocks, err)
	}
	return false, nil
}
