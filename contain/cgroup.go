//go:build linux

package contain

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// openCgroup finds a cgroup v2 directory this process may create job
// cgroups under, moving itself into a leaf of a delegated cgroup first
// (a cgroup with processes of its own should have no children beside them).
func (b *Box) openCgroup() error {
	pid := os.Getpid()
	if b.opts.Cgroup != "" {
		if err := intoLeaf(b.opts.Cgroup, pid); err != nil {
			return err
		}
		b.parent, b.reason = b.opts.Cgroup, "cgroup v2: "+b.opts.Cgroup
		return b.probeKill()
	}
	mnt, err := cgroup2Mount()
	if err != nil {
		return err
	}
	own, err := ownCgroup(pid)
	if err != nil {
		return err
	}
	dir := strings.TrimSuffix(mnt+own, "/")
	if own == "/" {
		// The root cgroup may hold processes beside child cgroups.
		removeStale(dir)
		parent := dir + "/" + ownerDirName(pid)
		if err := os.Mkdir(parent, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", parent, err)
		}
		b.parent, b.ownsDir = parent, true
		b.reason = "cgroup v2 at " + mnt + ", jobs under " + parent
		return b.probeKill()
	}
	if SystemdBooted() && !Delegated(dir) {
		return fmt.Errorf("cgroup %s belongs to systemd and is not delegated to leaderrun (Delegate=yes)", own)
	}
	if err := unix.Access(dir+"/cgroup.procs", unix.W_OK); err != nil {
		return fmt.Errorf("cgroup %s is not writable: %w", own, err)
	}
	if err := intoLeaf(dir, pid); err != nil {
		return err
	}
	b.parent = dir
	b.reason = "cgroup v2, delegated " + own + ", jobs under " + dir
	return b.probeKill()
}

// removeStale removes the empty cgroups that leaderruns killed before they
// could clean up left under dir (see ownerDirName), only those of this PID
// namespace whose pid is gone: another namespace's pid cannot be checked.
func removeStale(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		pid, sameNS, ok := OwnerPID(e.Name())
		if !ok || !sameNS || !e.IsDir() || pidExists(pid) {
			continue
		}
		RemoveTree(dir + "/" + e.Name())
	}
}

// pidExists tells whether pid names a process of this PID namespace, also
// one of another user (EPERM) or a zombie: when unsure, keep its cgroup.
func pidExists(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// RemoveTree removes an empty cgroup and its empty children; a cgroup with
// processes stays.
func RemoveTree(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			RemoveTree(dir + "/" + e.Name())
		}
	}
	_ = syscall.Rmdir(dir)
}

func (b *Box) probeKill() error {
	_, err := os.Stat(b.parent + "/cgroup.kill")
	b.hasKill = err == nil
	if !b.hasKill {
		b.reason += " (no cgroup.kill: freeze and kill)"
	}
	return nil
}

// intoLeaf moves this process out of dir into dir/leaderrun.PID, so that
// dir holds only child cgroups.
func intoLeaf(dir string, pid int) error {
	leaf := dir + "/" + ownerDirName(pid)
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create %s: %w", leaf, err)
	}
	if err := os.WriteFile(leaf+"/cgroup.procs", []byte(strconv.Itoa(pid)), 0); err != nil {
		_ = syscall.Rmdir(leaf)
		return fmt.Errorf("move leaderrun into %s: %w", leaf, err)
	}
	return nil
}

// cgroup2Mount finds where the cgroup v2 hierarchy is mounted: /sys/fs/cgroup
// on unified hosts, /sys/fs/cgroup/unified on hybrid ones.
func cgroup2Mount() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "id parent maj:min root mountpoint opts [optional...] - fstype source superopts"
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok || !strings.HasPrefix(post, "cgroup2 ") {
			continue
		}
		f := strings.Fields(pre)
		if len(f) >= 5 && f[3] == "/" {
			return unescapeMount(f[4]), nil
		}
	}
	return "", fmt.Errorf("%w: no cgroup2 mount in /proc/self/mountinfo", ErrNoCgroup)
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var out strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				out.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		out.WriteByte(s[i])
	}
	return out.String()
}

// ownCgroup is the v2 cgroup path of pid, from its "0::" line.
func ownCgroup(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: no cgroup v2 entry in /proc/%d/cgroup", ErrNoCgroup, pid)
}

// SystemdBooted reports whether systemd manages this host (sd_booted).
func SystemdBooted() bool {
	_, err := os.Stat("/run/systemd/system")
	return err == nil
}

// Delegated reports whether systemd delegated cgroup dir to its unit
// (Delegate=yes marks it with a "delegate" extended attribute).
func Delegated(dir string) bool {
	buf := make([]byte, 8)
	for _, attr := range []string{"trusted.delegate", "user.delegate"} {
		if n, err := unix.Getxattr(dir, attr, buf); err == nil && string(buf[:n]) == "1" {
			return true
		}
	}
	return false
}

// populated reads "populated" from a cgroup's cgroup.events: 1 while any
// process of the cgroup or its descendants has not exited.
func populated(dir string) (bool, error) {
	b, err := os.ReadFile(dir + "/cgroup.events")
	if err != nil {
		return false, err
	}
	return parsePopulated(b), nil
}

func parsePopulated(b []byte) bool {
	for _, line := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("populated ")); ok {
			return string(bytes.TrimSpace(v)) != "0"
		}
	}
	return true
}

func cgroupProcs(dir string) ([]int, error) {
	b, err := os.ReadFile(dir + "/cgroup.procs")
	if err != nil {
		return nil, err
	}
	return parsePids(b), nil
}

// killCgroup SIGKILLs every process of the cgroup in one step. Without
// cgroup.kill (kernels before 5.14), the cgroup is frozen so nothing can
// fork while its members are killed one by one.
//
// cgroup.kill passes over a process whose main thread has exited while
// other threads run (seen on Linux 6.18): such a process is then killed by
// its pid from cgroup.procs, after cgroup.kill has left everything else
// unable to fork.
func (j *Job) killCgroup() error {
	if j.hasKill {
		err := os.WriteFile(j.cgroup+"/cgroup.kill", []byte("1"), 0)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("kill cgroup %s: %w", j.cgroup, err)
		}
		pids, _ := cgroupProcs(j.cgroup)
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		return nil
	}
	if err := os.WriteFile(j.cgroup+"/cgroup.freeze", []byte("1"), 0); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("freeze cgroup %s: %w", j.cgroup, err)
	}
	defer os.WriteFile(j.cgroup+"/cgroup.freeze", []byte("0"), 0)
	for range 100 {
		pids, err := cgroupProcs(j.cgroup)
		if err != nil || len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return nil
}

// WaitGone blocks until nothing of the job can run or timeout passes, and
// reports whether it is gone. In cgroup mode it sleeps on cgroup.events
// (the kernel wakes pollers when "populated" changes), never polling.
func (j *Job) WaitGone(timeout time.Duration) bool {
	gone := j.waitGone(timeout)
	if gone {
		j.seenGone.Store(true)
	}
	return gone
}

func (j *Job) waitGone(timeout time.Duration) bool {
	end := time.Now().Add(timeout)
	if j.cgroup == "" {
		for j.Alive() {
			if time.Now().After(end) {
				return false
			}
			time.Sleep(10 * time.Millisecond)
		}
		return true
	}
	fd, err := unix.Open(j.cgroup+"/cgroup.events", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return errors.Is(err, unix.ENOENT) && j.waitIntruders(end)
	}
	defer unix.Close(fd)
	buf := make([]byte, 256)
	for {
		n, err := unix.Pread(fd, buf, 0)
		if err == nil && !parsePopulated(buf[:n]) {
			return j.waitIntruders(end)
		}
		left := time.Until(end)
		if left <= 0 {
			return false
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLPRI}}
		_, _ = unix.Poll(fds, int(left.Milliseconds())+1)
	}
}

// OwnCgroupDir is the directory of this process's cgroup v2.
func OwnCgroupDir() (string, error) {
	mnt, err := cgroup2Mount()
	if err != nil {
		return "", err
	}
	own, err := ownCgroup(os.Getpid())
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(mnt+own, "/"), nil
}
