//go:build linux

package contain

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// procInfo is what the group sweep needs of one process.
type procInfo struct {
	pid, ppid, pgid int
	start           uint64 // clock ticks after boot
}

// members lists the job's processes in group mode: its process group, the
// processes carrying its marker, orphans re-parented to us (with
// AdoptOrphans), and every descendant of those. With aliveOnly, processes
// whose threads are all zombies are left out.
func (j *Job) members(aliveOnly bool) []int {
	if j.pgid <= 1 && j.token == "" {
		return nil
	}
	self := os.Getpid()
	var adopt bool
	var known func(int) bool
	parent := self
	if j.box != nil {
		adopt, known = j.box.opts.AdoptOrphans, j.box.opts.Known
	} else if j.adoptFrom > 1 {
		// The guard's view: orphans re-parented to the supervisor, which is
		// the guard's parent; the guard itself is not part of the job.
		adopt, parent = true, j.adoptFrom
		known = func(pid int) bool { return pid == self }
	}
	procs := scanProcs()
	children := map[int][]int{}
	in := map[int]bool{}
	var queue []int
	add := func(pid int) {
		if !in[pid] && pid != self {
			in[pid] = true
			queue = append(queue, pid)
		}
	}
	for _, p := range procs {
		if p.start < j.since {
			// Older than the job's first process: cannot be part of it.
			continue
		}
		children[p.ppid] = append(children[p.ppid], p.pid)
		switch {
		case j.pgid > 1 && (p.pgid == j.pgid || p.pid == j.pid):
			add(p.pid)
		case adopt && p.ppid == parent && (known == nil || !known(p.pid)):
			add(p.pid)
		case j.token != "" && hasMarker(p.pid, j.token):
			add(p.pid)
		}
	}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			if known == nil || !known(c) {
				add(c)
			}
		}
	}
	out := make([]int, 0, len(in))
	for pid := range in {
		if !aliveOnly || ProcessAlive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

func scanProcs() []procInfo {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	out := make([]procInfo, 0, len(names))
	for _, name := range names {
		if name == "" || name[0] < '0' || name[0] > '9' {
			continue
		}
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		if st, ok := readStat("/proc/" + name + "/stat"); ok {
			out = append(out, procInfo{pid: pid, ppid: st.ppid, pgid: st.pgid, start: st.start})
		}
	}
	return out
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
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil || len(b) == 0 {
		return false
	}
	want := []byte(EnvMarker + "=" + token)
	for _, kv := range bytes.Split(b, []byte{0}) {
		if bytes.Equal(kv, want) {
			return true
		}
	}
	return false
}

// signalPid signals one process through a pidfd, so a pid reused since the
// sweep read it is not hit once the pidfd is open.
func signalPid(pid int, sig syscall.Signal) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil
		}
		return syscall.Kill(pid, sig)
	}
	defer unix.Close(fd)
	err = unix.PidfdSendSignal(fd, sig, nil, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	return err
}

func monoNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}
