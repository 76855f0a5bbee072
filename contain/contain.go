//go:build linux

// Package contain keeps a job — the child leaderrun starts and every process
// it starts in turn — in one place where it can be stopped as a whole and
// seen to be gone (DESIGN §1.4).
//
// Two modes:
//
//   - cgroup: the job runs in a fresh cgroup v2 of its own. Stop is a write
//     to cgroup.kill (freeze and SIGKILL every member on kernels without
//     it); gone is "populated 0" in cgroup.events. A process cannot leave
//     its cgroup without write access to another one, which a job run by
//     root still has: that is the limit of this mode.
//   - group: the job's process group, plus every process carrying the job's
//     marker in its environment, plus every descendant of those, plus (in
//     leaderrun itself, a child subreaper) every orphan re-parented to us.
//     Sweeps repeat until none is left. A process that leaves the group,
//     clears its environment and is re-parented elsewhere escapes.
//
// In both modes a process counts as alive until it is reaped if any of its
// threads is not a zombie: a program whose main thread exited while other
// threads run looks like a zombie in /proc/PID/stat, yet it still works.
//
// The package uses only the standard library and golang.org/x/sys, so the
// small leaderrun-guard binary can link it.
package contain

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// Mode is how jobs are contained.
type Mode string

// Modes (DESIGN §1.4, --contain).
const (
	Auto   Mode = "auto"
	Cgroup Mode = "cgroup"
	Group  Mode = "group"
)

// EnvMarker names the environment variable that marks every process of a
// job; its value is unique to one run of the child.
const EnvMarker = "LEADERRUN_JOB"

// ErrNoCgroup means cgroup mode was asked for but cannot be had here.
var ErrNoCgroup = errors.New("no usable cgroup v2")

// ParseMode reads the --contain value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(strings.ToLower(strings.TrimSpace(s))); m {
	case Auto, Cgroup, Group:
		return m, nil
	}
	return "", fmt.Errorf("must be auto, cgroup or group, got %q", s)
}

// Options tune a Box.
type Options struct {
	// AdoptOrphans counts, in group mode, every process re-parented to this
	// one (a child subreaper) as part of the running job, unless Known says
	// it is ours. Right for leaderrun, which runs one job at a time; wrong
	// for a test process running many.
	AdoptOrphans bool
	// Known reports processes this process started for itself (the guard),
	// never part of a job.
	Known func(pid int) bool
	// Cgroup, when set, is a cgroup directory already delegated to this
	// process (for example a systemd scope); jobs are created beneath it.
	Cgroup string
	// Reaped, when set, counts the children this process has reaped so
	// far (its one reaper). In group mode with AdoptOrphans, a scan during
	// which the count did not move sees every child of the job this
	// process has: one such scan that finds nothing proves the job gone
	// (group.go). Without it two are needed.
	Reaped func() uint64
	// HoldReaps, when set, runs f while this process reaps none of its
	// children. Group mode then signals the job's first process's group
	// with one kill(-pgid), checked inside f to be still unreaped.
	// Without it, group mode signals member by member only.
	HoldReaps func(f func())
	// Key names the leadership the jobs run under (leaderrun: backend,
	// prefix and key). Its hash is part of every job's marker and cgroup
	// name, and Sweep kills the leftover jobs of the same Key.
	Key string
}

// Box is where one leaderrun places its jobs, chosen once at start.
type Box struct {
	mode    Mode
	reason  string
	opts    Options
	parent  string // cgroup mode: directory under which job cgroups are made
	ownsDir bool   // parent was created by us and is removed by Close
	hasKill bool   // cgroup.kill exists
	seq     atomic.Uint64

	// spared: the leaderruns, alive then, of the unregistered jobs of the
	// key the last settled Sweep saw (registry.go).
	// registry: the identity of the key's registry directory that
	// Sweep read (registry.go).
	mu       sync.Mutex
	spared   []owner
	registry regID
}

// Open picks the containment mode. Auto takes a cgroup where one can be had
// and falls back to group mode; Cgroup fails when none can be had.
// Reason says why, for the one log line at start.
func Open(want Mode, opts Options) (*Box, error) {
	b := &Box{opts: opts}
	if want == Group {
		b.mode, b.reason = Group, "--contain group"
		return b, nil
	}
	err := b.openCgroup()
	if err == nil {
		b.mode = Cgroup
		return b, nil
	}
	if want == Cgroup {
		return nil, fmt.Errorf("--contain cgroup: %w", err)
	}
	b.mode, b.reason = Group, groupReason(err, os.Geteuid())
	return b, nil
}

// groupReason says why Auto fell back to group mode, after err from
// openCgroup. A user other than root may not make a cgroup where its
// processes are unless one was delegated to it: that is the normal state
// of a user's shell, said as what it means and how to get one, not as the
// failure of a mkdir.
func groupReason(err error, euid int) string {
	if euid != 0 && errors.Is(err, os.ErrPermission) {
		return "no cgroup of its own for a non-root user without a delegated cgroup " +
			"(run under systemd --user, or as a unit with Delegate=yes, for one): jobs are held by process group"
	}
	return "no cgroup: " + err.Error()
}

// Mode is the mode in force.
func (b *Box) Mode() Mode { return b.mode }

// Reason says why that mode was chosen.
func (b *Box) Reason() string { return b.reason }

// Close removes the cgroup directory Open created, if it is empty.
func (b *Box) Close() error {
	if b.ownsDir {
		if err := syscall.Rmdir(b.parent); err != nil && !errors.Is(err, syscall.ENOENT) {
			return fmt.Errorf("remove cgroup %s: %w", b.parent, err)
		}
	}
	return nil
}

// NewJob prepares the place for one run of the child. In cgroup mode it
// creates the job's cgroup; the child must be started into it with
// SysProcAttr.
func (b *Box) NewJob() (*Job, error) {
	return b.newJob(false)
}

// newJob makes a job, or with check a health check (check.go): its token,
// and in cgroup mode its cgroup, job.TOKEN or check.TOKEN.
func (b *Box) newJob(check bool) (*Job, error) {
	n := b.seq.Add(1)
	j := &Job{
		box:       b,
		cgfd:      -1,
		leaderFD:  -1,
		notBefore: bootTicks(),
		check:     check,
	}
	kind, what := "job.", "the job's"
	if check {
		j.token = b.newCheckToken(n)
		kind, what = "check.", "the health check's"
	} else {
		j.token = b.newToken(n)
	}
	if b.opts.Key != "" {
		// Before anything of the job exists (registry.go).
		if err := register(j.token); err != nil {
			return nil, err
		}
	}
	if b.mode == Cgroup {
		base, _ := unseal(j.token) // the seal stays in the environment
		dir := b.parent + "/" + kind + base
		if err := os.Mkdir(dir, 0o755); err != nil {
			unregister(j.token)
			return nil, fmt.Errorf("create %s cgroup: %w", what, err)
		}
		fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		if err != nil {
			_ = syscall.Rmdir(dir)
			unregister(j.token)
			return nil, fmt.Errorf("open %s cgroup: %w", what, err)
		}
		j.cgroup, j.cgfd, j.hasKill = dir, fd, b.hasKill
		if !check {
			// A check's processes are never in leaderrun's leaf on
			// purpose: what is found there is the job's.
			j.leaf = b.leafDir()
		}
	}
	return j, nil
}

// Job is one run of the child and everything it starts.
type Job struct {
	box     *Box
	token   string
	cgroup  string
	cgfd    int
	hasKill bool
	leaf    string // leaderrun's own cgroup, whose intruders are the job's
	pgid    int
	pid     int
	since   uint64 // no process of the job is older (clock ticks after boot)
	// leaderStart is the first process's start time, 0 if unknown: with
	// pid, its identity.
	leaderStart uint64
	// leaderFD is a pidfd of the first process from clone itself, -1
	// without one (group mode, this process's own child).
	leaderFD int
	// notBefore is the time NewJob was called, in the clock ticks of
	// start times: every process of the job is at least as young.
	notBefore uint64
	// adoptFrom, in the guard's view, is the supervisor: its orphans are
	// the job's.
	adoptFrom int
	// check: a health check (check.go), which adopts no orphans.
	check bool
	// seenGone: WaitGone saw the job gone (registry.go).
	seenGone atomic.Bool

	// Group mode's memory of its scans (group.go).
	mu    sync.Mutex
	seen  map[int]uint64 // members of the last scan: pid → start time
	dead  map[int]uint64 // those of them whose threads had all exited
	quiet int            // settled scans in a row that found no live member
}

// Attach describes a job started by another process (the guard's view): its
// cgroup directory, or else its process group, marker and Since.
func Attach(cgroup string, pgid int, token string, since uint64) *Job {
	j := &Job{token: token, cgroup: cgroup, cgfd: -1, pgid: pgid, pid: pgid, since: since, leaderStart: since, leaderFD: -1}
	if cgroup != "" {
		_, err := os.Stat(cgroup + "/cgroup.kill")
		j.hasKill = err == nil
		j.leaf = guardLeaf()
	}
	return j
}

// AdoptFrom counts, in group mode, the children of pid (a subreaper
// supervisor, other than the calling process) that it did not start as part
// of the job: the guard's view of orphans re-parented to leaderrun.
func (j *Job) AdoptFrom(pid int) { j.adoptFrom = pid }

// Env is the marker to add to the child's environment.
func (j *Job) Env() string { return EnvMarker + "=" + j.token }

// Token is the job's marker value.
func (j *Job) Token() string { return j.token }

// Cgroup is the job's cgroup directory, empty in group mode.
func (j *Job) Cgroup() string { return j.cgroup }

// Pgid is the process group of the job's first process.
func (j *Job) Pgid() int { return j.pgid }

// SysProcAttr makes the child start in the job's cgroup (clone3
// CLONE_INTO_CGROUP), so not even its first instruction runs outside it.
// In group mode it asks clone for a pidfd of the child (CLONE_PIDFD): the
// one handle on it that no reap and reuse of its pid can redirect.
func (j *Job) SysProcAttr(attr *syscall.SysProcAttr) {
	if j.cgfd >= 0 {
		attr.UseCgroupFD = true
		attr.CgroupFD = j.cgfd
	}
	if j.cgroup == "" && j.box != nil && attr.PidFD == nil {
		attr.PidFD = &j.leaderFD
	}
}

// Started records the child's pid, which leads the job's process group, and
// its start time. The start time is trusted only if the child's pidfd says
// it was not reaped meanwhile (its pid cannot have been reused then);
// otherwise no start time identifies it and Since is the time NewJob ran.
func (j *Job) Started(pid int) {
	j.pid, j.pgid = pid, pid
	st := StartTime(pid)
	if j.leaderFD >= 0 && unix.PidfdSendSignal(j.leaderFD, 0, nil, 0) != nil {
		st = 0
	}
	j.leaderStart, j.since = st, st
	if st == 0 || st < j.notBefore {
		j.leaderStart, j.since = 0, j.notBefore
	}
	j.closeFD()
}

// Since is the start time of the job's first process (clock ticks after
// boot): no older process can belong to the job.
func (j *Job) Since() uint64 { return j.since }

// Contains reports whether pid is a live process of the job: in the job's
// cgroup or one below it in cgroup mode; in group mode, carrying its
// marker, whose token is the job's alone. It reads /proc once or twice and
// only what NewJob set, so it may run beside Started, from the fork on:
// a process that exits meanwhile is no longer the job's.
func (j *Job) Contains(pid int) bool {
	if pid <= 0 {
		return false
	}
	if j.cgroup != "" {
		mnt, err := cgroup2Mount()
		if err != nil {
			return false
		}
		own, err := ownCgroup(pid)
		if err != nil {
			return false
		}
		dir := strings.TrimSuffix(mnt+own, "/")
		return dir == j.cgroup || strings.HasPrefix(dir, j.cgroup+"/")
	}
	return j.token != "" && hasMarker(pid, j.token)
}

func (j *Job) closeFD() {
	if j.cgfd >= 0 {
		_ = syscall.Close(j.cgfd)
		j.cgfd = -1
	}
}

// Signal sends sig to every process of the job, then SIGCONT so a stopped
// process can act on it at once instead of wasting the kill grace. In group
// mode it reaches only processes proven members (group.go).
func (j *Job) Signal(sig syscall.Signal) error {
	if j.cgroup == "" {
		if sig == syscall.SIGKILL || sig == syscall.SIGCONT {
			return j.groupSignalAll(sig)
		}
		return j.groupSignalAll(sig, syscall.SIGCONT)
	}
	if err := j.each(sig); err != nil {
		return err
	}
	if sig != syscall.SIGKILL && sig != syscall.SIGCONT {
		return j.each(syscall.SIGCONT)
	}
	return nil
}

// Kill SIGKILLs the whole job: cgroup.kill, or in group mode sweeps that
// SIGKILL every member and scan again until the job is gone, for at most
// killSweepLimit. A caller that still finds the job alive calls it again.
func (j *Job) Kill() error {
	if j.cgroup != "" {
		err := j.killCgroup()
		j.signalIntruders(syscall.SIGKILL)
		return err
	}
	return j.groupKill()
}

// Alive reports whether any process of the job can still run.
func (j *Job) Alive() bool {
	if j.cgroup != "" {
		pop, err := populated(j.cgroup)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return true
		}
		return pop || len(j.Intruders()) > 0
	}
	return j.groupAlive()
}

// Remove deletes the job's cgroup once it is empty, and lets go of the
// first process's pidfd.
func (j *Job) Remove() error {
	if j.check {
		liveChecks.Delete(j.token)
	}
	if j.token != "" {
		// A check too when it was not seen gone: what of it survived
		// its kill is left to the next sweep, which another user's copy
		// of its marker must not stall for good (seal.go).
		markEnded(j.token)
		// A job is removed once gone (or never started); a check maybe
		// not: its entry stays until it is seen gone, or a sweep after
		// its leaderrun's death (registry.go).
		if !j.check || j.seenGone.Load() {
			unregister(j.token)
		}
	}
	j.closeFD()
	if j.leaderFD >= 0 {
		_ = syscall.Close(j.leaderFD)
		j.leaderFD = -1
	}
	if j.cgroup == "" {
		return nil
	}
	if err := syscall.Rmdir(j.cgroup); err != nil && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("remove cgroup %s: %w", j.cgroup, err)
	}
	return nil
}

// each sends sig to every process of the job's cgroup.
func (j *Job) each(sig syscall.Signal) error {
	pids, err := cgroupProcs(j.cgroup)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	pids = append(pids, j.Intruders()...)
	for _, pid := range pids {
		_ = signalPid(pid, sig)
	}
	return nil
}

// signalPid signals one process of a cgroup through a pidfd, so a pid
// reused since cgroup.procs was read is not hit once the pidfd is open.
func signalPid(pid int, sig syscall.Signal) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil
		}
		return syscall.Kill(pid, sig)
	}
	defer unix.Close(fd)
	return ignoreESRCH(unix.PidfdSendSignal(fd, sig, nil, 0))
}

func parsePids(b []byte) []int {
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil && n > 0 {
			out = append(out, n)
		}
	}
	return out
}
