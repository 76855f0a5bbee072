//go:build linux

package contain

import (
	"bytes"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// procInfo is what the group sweep needs of one process.
type procInfo struct {
	pid, ppid, pgid int
	start           uint64 // clock ticks after boot
	state           byte   // of the main thread: 'Z' once it has exited
}

// scanProcs lists /proc an entry or two at a time and reads each stat file
// as soon as its pid is listed, calling visit (if not nil) on each: the
// shorter the time between listing a process and reading it, the less it
// can do in between. Pids are listed in increasing order and new ones are
// mostly higher, so a process forked while the scan runs is mostly listed
// by the same scan. vanished counts the pids listed whose stat file was
// gone a moment later.
func scanProcs(visit func(procInfo)) (procs []procInfo, vanished int) {
	fd, err := unix.Open("/proc", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, 0
	}
	defer unix.Close(fd)
	buf := make([]byte, 64)
	procs = make([]procInfo, 0, 256)
	var names []string
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EINVAL && len(buf) < 4096 {
			buf = make([]byte, 2*len(buf)) // an entry longer than the buffer
			continue
		}
		if err != nil || n <= 0 {
			return procs, vanished
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names[:0])
		for _, name := range names {
			if name == "" || name[0] < '0' || name[0] > '9' {
				continue
			}
			pid, err := strconv.Atoi(name)
			if err != nil {
				continue
			}
			st, ok := readStat("/proc/" + name + "/stat")
			if !ok {
				vanished++
				continue
			}
			p := procInfo{pid: pid, ppid: st.ppid, pgid: st.pgid, start: st.start, state: st.state}
			procs = append(procs, p)
			if visit != nil {
				visit(p)
			}
		}
	}
}

type stat struct {
	state      byte
	ppid, pgid int
	start      uint64
}

// readStat reads state, parent, process group and start time from a stat
// file. comm may hold spaces and parentheses, so fields are counted from
// the last ')'.
func readStat(path string) (stat, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return stat{}, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return stat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 || len(f[0]) != 1 {
		return stat{}, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgid, err2 := strconv.Atoi(f[2])
	start, err3 := strconv.ParseUint(f[19], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return stat{}, false
	}
	return stat{state: f[0][0], ppid: ppid, pgid: pgid, start: start}, true
}

// StartTime is pid's start time in clock ticks after boot, 0 if unknown.
func StartTime(pid int) uint64 {
	st, _ := readStat("/proc/" + strconv.Itoa(pid) + "/stat")
	return st.start
}

// ProcessAlive reports whether any thread of pid is not a zombie. A process
// whose main thread exited shows "Z" in /proc/PID/stat while its other
// threads still run; it is alive until every thread is gone.
func ProcessAlive(pid int) bool {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	d, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer d.Close()
	tids, _ := d.Readdirnames(-1)
	for _, tid := range tids {
		if st, ok := readStat(dir + "/" + tid + "/stat"); ok && st.state != 'Z' && st.state != 'X' {
			return true
		}
	}
	return false
}

// hasMarker reports whether pid's initial environment holds the job marker.
func hasMarker(pid int, token string) bool {
	return slices.Contains(markers(pid), token)
}

// markers are the job marker values in pid's initial environment. A
// process whose main thread has exited shows no environment in
// /proc/PID/environ while its other threads run on; their own view of it,
// /proc/PID/task/TID/environ, still holds it.
func markers(pid int) []string {
	dir := "/proc/" + strconv.Itoa(pid)
	b, err := os.ReadFile(dir + "/environ")
	if err != nil || len(b) == 0 {
		d, derr := os.Open(dir + "/task")
		if derr != nil {
			return nil
		}
		tids, _ := d.Readdirnames(-1)
		d.Close()
		for _, tid := range tids {
			if tid == strconv.Itoa(pid) {
				continue
			}
			if b, err = os.ReadFile(dir + "/task/" + tid + "/environ"); err == nil && len(b) > 0 {
				break
			}
		}
	}
	var out []string
	prefix := []byte(EnvMarker + "=")
	for _, kv := range bytes.Split(b, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, prefix); ok {
			out = append(out, string(v))
		}
	}
	return out
}

func monoNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// uids reads pid's real and effective uid from its status file (a zombie's
// too).
func uids(pid int) (real, eff int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0, false
	}
	for line := range bytes.SplitSeq(b, []byte{'\n'}) {
		if rest, found := bytes.CutPrefix(line, []byte("Uid:")); found {
			f := strings.Fields(string(rest))
			if len(f) < 2 {
				return 0, 0, false
			}
			r, err1 := strconv.Atoi(f[0])
			e, err2 := strconv.Atoi(f[1])
			return r, e, err1 == nil && err2 == nil
		}
	}
	return 0, 0, false
}
