//go:build linux

package contain

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// pidCursor watches where this PID namespace hands out its next pid
// (/proc/sys/kernel/ns_last_pid, the last pid given out). The kernel hands
// pids out upwards from there, each the next one free, and goes back to the
// lowest pids only at pid_max. So while the cursor has not gone down, every
// process made since an earlier sample has a higher pid than any made
// before it: a scan of /proc, which lists pids in increasing order, lists
// every process forked during it by a process it has not read yet, or by
// one it has read alive (the sweep's argument, sweeper.look).
//
// A sample cannot tell one trip round all pids from none, so a gap between
// two samples longer than the host could take to fork pid_max processes
// (at maxForkRate) counts as a wrap too.
type pidCursor struct {
	fd   int
	max  int       // pid_max
	last int       // the last sample, -1 before the first and after one failed
	at   time.Time // when it was taken
	buf  [24]byte

	// What made marks say wrapped, for the sweep's error: the cursor seen
	// lower, and gaps too long to tell (the longest).
	downs, gaps int
	longest     time.Duration
}

// maxForkRate bounds how many processes a host forks in a second; far above
// what any host does, tasklist lock and all.
const maxForkRate = 200_000

// openPidCursor opens the cursor; nil where it cannot be read (an old
// kernel, /proc/sys not mounted): no scan is then wrap-free.
func openPidCursor() *pidCursor {
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		return nil
	}
	max, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || max <= 300 {
		return nil
	}
	fd, err := unix.Open("/proc/sys/kernel/ns_last_pid", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	c := &pidCursor{fd: fd, max: max, last: -1}
	if c.read() < 0 {
		c.close()
		return nil
	}
	c.last, c.at = c.read(), time.Now()
	return c
}

// String tells what kept scans from being wrap-free.
func (c *pidCursor) String() string {
	if c == nil {
		return "the pid cursor unreadable"
	}
	return fmt.Sprintf("pids went round %d times, %d pauses too long to tell (longest %s)", c.downs, c.gaps, c.longest.Round(time.Millisecond))
}

func (c *pidCursor) close() {
	if c != nil && c.fd >= 0 {
		unix.Close(c.fd)
		c.fd = -1
	}
}

// read is the cursor now, -1 if it cannot be read.
func (c *pidCursor) read() int {
	n, err := unix.Pread(c.fd, c.buf[:], 0)
	if err != nil || n <= 0 {
		return -1
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(c.buf[:n])))
	if err != nil {
		return -1
	}
	return v
}

// mark samples the cursor and reports whether pids may have been handed out
// below an earlier sample since the last mark, or since the cursor was
// opened. A nil cursor, or one that could not be read, always says so.
func (c *pidCursor) mark() (wrapped bool) {
	if c == nil {
		return true
	}
	now := time.Now()
	v := c.read()
	switch {
	case v < 0, c.last < 0, v < c.last:
		wrapped = true
		c.downs++
	case now.Sub(c.at) >= time.Duration(c.max-300)*time.Second/maxForkRate:
		wrapped = true
		c.gaps++
		c.longest = max(c.longest, now.Sub(c.at))
	}
	c.last, c.at = v, now
	return wrapped
}
