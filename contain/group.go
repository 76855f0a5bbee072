//go:build linux

package contain

import (
	"errors"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Group mode: who belongs to the job, when the job is gone, and how it is
// signalled (DESIGN §1.4).
//
// # Members
//
// A process belongs to the job if it is no older than the job (start time
// at least Since) and it is
//
//   - the first process itself: its pid AND its start time match;
//   - a child of the root (leaderrun, a child subreaper; in the guard's view
//     the supervising leaderrun) that the root did not start for itself
//     and that carries no marker of one of the root's health checks
//     (check.go): such an orphan is the check's, killed with it;
//   - a process proven a member by an earlier scan of this Job (same pid,
//     same start time): once in the job, always in the job;
//   - a process carrying the job's marker in its environment;
//   - a descendant of a member;
//   - in the job's process group, while a member proven by one of the rules
//     above is in that group too. A process group number is reused only
//     after the group was empty; a proven member in it shows the group is
//     still the job's. Without such an anchor (the first process reaped, the
//     rest gone or moved away), a bare process group number proves nothing
//     and nobody is counted or signalled for it.
//
// Under a live leaderrun the root rule alone is exact: leaderrun is a child
// subreaper, so every process of the job descends from it, and a process
// whose parent dies is re-parented to the nearest subreaper above it, which
// is a process of the job or leaderrun. Following parents up from any live
// process of the job therefore reaches a live child of the root. The other
// rules serve the guard once leaderrun is dead, when orphans go to init.
// (A job process that puts the marker of a running health check in its
// environment leaves the root rule until that check ends, and the check
// kills it then.)
//
// A health check (check.go) is a Job of its own with no root: its first
// process, the processes carrying its marker, their descendants and its
// process group while anchored.
//
// # Gone
//
// A scan of /proc is not atomic: it lists the pids, then reads each stat
// file. A process created after the listing is missed, and a process that
// exits before its turn is missed too. The double fork of a daemon (fork,
// setsid, fork, exit) can do both at once: the middle process is listed,
// forks the daemon after the listing and exits before it is read. One empty
// scan proves nothing. The judgement rests on this:
//
//	(1) Processes are only created by live processes. A job none of whose
//	    processes lives at some instant stays empty for ever: there is no
//	    member left to fork, to pass the marker on, or to anchor the group.
//	(2) If the job has a live process at the instant T a scan begins, the
//	    root has a live child C of the job at T (see Members). C existed
//	    when the listing began, so the scan lists it when it reaches its
//	    pid and then reads its stat, and finds one of three things:
//	      a. C alive, a child of the root: a live member, the job is alive;
//	      b. C a zombie (it exited during the scan): a member that died since
//	         the last scan;
//	      c. nothing, for C was reaped during the scan, before its pid was
//	         listed or between listing and read: only the root reaps its
//	         children.
//
// So a scan is settled when it finds no live member, every dead member it
// finds (zombie) was already dead in the previous scan (so it died before
// this scan began, and its children had been re-parented to the root by
// then: they are listed and read like C), no member of the previous scan
// has vanished since, no pid it listed was gone before it could be read
// (case c seen directly), and, where the root's reaps can be counted, none
// happened during the scan (case c whatever the timing). leaderrun counts
// its own reaps (Options.Reaped), so for leaderrun one settled scan proves
// (2) false, and by (1) the job is gone for good.
//
// Where reaps cannot be counted (the guard: the reaper is the supervising
// leaderrun, or init once it died) case c is caught only if C is reaped
// between its listing and its read; C reaped before the scan reached its
// pid leaves no trace. Two consecutive settled scans are required there: a
// process that relays the job through the first scan (forked after its
// listing) is alive when the second begins and must be reaped, unseen,
// before the second reaches it. To pass, a job must do that in every scan
// of a row; the guard's residue, the price of not seeing reaps. /proc is
// read an entry or two at a time, each stat file as soon as its pid is
// listed, which leaves a process microseconds between the two, and a pid
// forked during a scan is mostly higher than the scan's position and
// listed by the same scan.
//
// # Signals
//
// Only to processes proven members: each is named by pid and start time,
// a pidfd is opened for the pid and the start time read again after it, so
// the pidfd is known to hold the process the scan saw; the signal goes
// through that pidfd, which no later process can take over. kill(-pgid)
// reaches the whole group at once (a fork racing with it is held back by
// the kernel), so it is used as well, but only while the group leader is
// known to be this process's own unreaped child: its pidfd, from clone
// itself, still answers, and this process's reaper is held off meanwhile
// (Options.HoldReaps). Then the group number cannot have passed to anyone
// else. The guard and every other view enumerate.
//
// # Kill
//
// SIGKILL every member the moment the scan reads it and can tell it one
// (a child of the root, a descendant of a member already read, a marked
// process...), the rest once the scan is over; scan again, and repeat
// until the job is gone as above, within killSweepLimit. Callers that still
// find the job alive call Kill again. A killed process can fork no more, so
// each pass leaves only the children forked since it read their parent.

// killSweepLimit bounds one Kill in group mode. The supervisor and the
// guard call Kill again while the job lives, so a bound keeps their loops
// turning without letting the job go.
const killSweepLimit = 250 * time.Millisecond

// maxLooks bounds the scans of one Alive call; a job that is not settled by
// then is reported alive and asked again by the caller's next poll.
const maxLooks = 4

// ticksPerSecond is USER_HZ, the unit of start times in /proc/PID/stat:
// 100 on every architecture Go supports on Linux.
const ticksPerSecond = 100

// bootTicks is the time since boot in the clock ticks of /proc start
// times: no process created from now on has an earlier start time.
func bootTicks() uint64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
		return 0
	}
	return uint64(ts.Nano()) / (1e9 / ticksPerSecond)
}

// root is the process whose children are the job's (leaderrun itself, or
// in the guard's view the supervisor), 0 for none, and the test for the
// processes it started for itself.
func (j *Job) root() (root int, known func(int) bool) {
	self := os.Getpid()
	if j.box != nil {
		if j.box.opts.AdoptOrphans && !j.check {
			return self, j.box.opts.Known
		}
		return 0, j.box.opts.Known
	}
	if j.adoptFrom > 1 {
		// The guard's view: orphans re-parented to the supervisor, which is
		// the guard's parent; the guard itself is not part of the job.
		return j.adoptFrom, func(pid int) bool { return pid == self }
	}
	return 0, nil
}

// reaps reads this process's reap counter, if it has one.
func (j *Job) reaps() (uint64, bool) {
	if j.box == nil || j.box.opts.Reaped == nil {
		return 0, false
	}
	return j.box.opts.Reaped(), true
}

// need is how many settled scans in a row make the job gone: one where the
// root is this process and counts its reaps, two elsewhere.
func (j *Job) need() int {
	root, _ := j.root()
	if _, ok := j.reaps(); ok && root == os.Getpid() {
		return 1
	}
	return 2
}

// isLeader tells the job's first process by pid and start time.
func (j *Job) isLeader(p procInfo) bool {
	return j.pid > 1 && p.pid == j.pid && j.leaderStart != 0 && p.start == j.leaderStart
}

// classify picks the job's members out of one scan (see Members above);
// marked are the processes that carried the marker when the scan read them.
func (j *Job) classify(procs []procInfo, marked map[int]bool) []procInfo {
	root, known := j.root()
	self := os.Getpid()
	mine := func(pid int) bool { return known != nil && known(pid) }
	checks := checkOf(root)
	byPid := make(map[int]int, len(procs))
	children := map[int][]int{}
	for i, p := range procs {
		byPid[p.pid] = i
		if p.start >= j.since {
			children[p.ppid] = append(children[p.ppid], p.pid)
		}
	}
	in := map[int]bool{}
	var queue []int
	add := func(pid int) {
		if !in[pid] && pid != self {
			in[pid] = true
			queue = append(queue, pid)
		}
	}
	closure := func() {
		for len(queue) > 0 {
			pid := queue[0]
			queue = queue[1:]
			for _, c := range children[pid] {
				if !mine(c) {
					add(c)
				}
			}
		}
	}
	for _, p := range procs {
		if p.start < j.since || p.pid == self {
			// Older than the job's first process: cannot be part of it.
			continue
		}
		start, seen := j.seen[p.pid]
		switch {
		case j.isLeader(p):
			add(p.pid)
		case root > 1 && p.ppid == root && !mine(p.pid) && !(checks != nil && checks(p.pid)):
			// Not an orphan of one of the root's health checks
			// (check.go).
			add(p.pid)
		case seen && start == p.start:
			add(p.pid)
		case marked[p.pid]:
			add(p.pid)
		}
	}
	closure()
	if j.pgid > 1 {
		anchored := false
		for pid := range in {
			if procs[byPid[pid]].pgid == j.pgid {
				anchored = true
				break
			}
		}
		if anchored {
			for _, p := range procs {
				if p.pgid == j.pgid && p.start >= j.since && !mine(p.pid) {
					add(p.pid)
				}
			}
			closure()
		}
	}
	out := make([]procInfo, 0, len(in))
	for pid := range in {
		out = append(out, procs[byPid[pid]])
	}
	return out
}

// look scans /proc once, returns the job's live members and counts the
// scan towards the judgement "gone" (see Gone above). With kill, every
// process the scan can tell a member as soon as it reads it (see quick) is
// SIGKILLed there and then, and the rest of the live members after the
// scan; killed are the pids signalled.
func (j *Job) look(kill bool) (live []procInfo, killed map[int]bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.pgid <= 1 && j.token == "" {
		j.quiet = j.need()
		return nil, nil
	}
	r0, counted := j.reaps()
	// The marker is read as each pid is listed, once: read again after the
	// scan it would be gone with a process that forked and exited since,
	// and a relay of such processes would look like no job at all.
	marked := map[int]bool{}
	var quick func(procInfo)
	if kill {
		killed = map[int]bool{}
		quick = j.quick(marked, func(p procInfo) {
			if signalMember(p, syscall.SIGKILL) == nil {
				killed[p.pid] = true
			}
		})
	}
	me := os.Getpid()
	procs, vanished := scanProcs(func(p procInfo) {
		if j.token != "" && p.start >= j.since && p.pid != me && hasMarker(p.pid, j.token) {
			marked[p.pid] = true
		}
		if quick != nil {
			quick(p)
		}
	})
	members := j.classify(procs, marked)
	// A process listed and gone before it could be read may have been of
	// the job and have forked before it went.
	settled := vanished == 0
	dead := map[int]uint64{}
	now := make(map[int]uint64, len(members))
	for _, m := range members {
		now[m.pid] = m.start
		if ProcessAlive(m.pid) {
			live = append(live, m)
			continue
		}
		dead[m.pid] = m.start
		if st, ok := j.dead[m.pid]; !ok || st != m.start {
			settled = false // died since the last scan, maybe during this one
		}
	}
	for pid, st := range j.seen {
		if now[pid] != st {
			settled = false // reaped since the last scan, maybe during this one
		}
	}
	if r1, _ := j.reaps(); counted && r1 != r0 {
		settled = false
	}
	j.seen, j.dead = now, dead
	if len(live) > 0 || !settled {
		j.quiet = 0
	} else {
		j.quiet++
	}
	return live, killed
}

// quick returns a visitor for scanProcs that calls hit on every process it
// can tell a member of the job from what the scan read so far: by the
// rules of classify that need no later entry (a descendant is known once
// its parent was; a process of the group once a member in it was). marked
// holds the processes read with the marker, up to this one. Called with
// j.mu held.
func (j *Job) quick(marked map[int]bool, hit func(procInfo)) func(procInfo) {
	root, known := j.root()
	self := os.Getpid()
	checks := checkOf(root)
	in := map[int]bool{}
	anchored := false
	return func(p procInfo) {
		if p.start < j.since || p.pid == self {
			return
		}
		mine := func() bool { return known != nil && known(p.pid) }
		check := func() bool { return checks != nil && checks(p.pid) }
		start, seen := j.seen[p.pid]
		member := j.isLeader(p) ||
			(seen && start == p.start) ||
			(in[p.ppid] && !mine()) ||
			(root > 1 && p.ppid == root && !mine() && !check()) ||
			(anchored && j.pgid > 1 && p.pgid == j.pgid) ||
			marked[p.pid]
		if !member {
			return
		}
		in[p.pid] = true
		if j.pgid > 1 && p.pgid == j.pgid {
			anchored = true
		}
		hit(p)
	}
}

// gone reports whether enough settled scans in a row found nothing.
func (j *Job) gone() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.quiet >= j.need()
}

// groupAlive reports whether anything of the job can still run.
func (j *Job) groupAlive() bool {
	for range maxLooks {
		if live, _ := j.look(false); len(live) > 0 {
			return true
		}
		if j.gone() {
			return false
		}
	}
	return true
}

// groupSignal sends sig with kill(-pgid), only while the group leader is
// this process's own child and not reaped, with this process's reaper held
// off: then the group's number is the job's. It reports whether it did.
func (j *Job) groupSignal(sig syscall.Signal) bool {
	if j.leaderFD < 0 || j.pgid <= 1 || j.box == nil || j.box.opts.HoldReaps == nil {
		return false
	}
	sent := false
	j.box.opts.HoldReaps(func() {
		if unix.PidfdSendSignal(j.leaderFD, 0, nil, 0) != nil {
			return // reaped: the group number may be anyone's
		}
		sent = syscall.Kill(-j.pgid, sig) == nil
	})
	return sent
}

// groupSignalAll sends each of sigs, in order, to every live member.
func (j *Job) groupSignalAll(sigs ...syscall.Signal) error {
	var grouped bool
	for _, sig := range sigs {
		if j.groupSignal(sig) {
			grouped = true
		}
	}
	var first error
	live, _ := j.look(false)
	for _, m := range live {
		if grouped && m.pgid == j.pgid {
			// Reached by kill(-pgid), which no fork can race; a process
			// forked into the group since was born after the signal.
			continue
		}
		if err := signalMember(m, sigs...); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// groupKill SIGKILLs every member, scans again and repeats until the job is
// gone or killSweepLimit passed.
func (j *Job) groupKill() error {
	end := time.Now().Add(killSweepLimit)
	var first error
	for {
		j.groupSignal(syscall.SIGKILL)
		live, killed := j.look(true)
		for _, m := range live {
			if killed[m.pid] {
				continue
			}
			if err := signalMember(m, syscall.SIGKILL); err != nil && first == nil {
				first = err
			}
		}
		if len(live) == 0 && j.gone() {
			return first
		}
		if time.Now().After(end) {
			return first
		}
		if len(live) == 0 {
			// Let the killed exit and be reaped before the next scan.
			time.Sleep(time.Millisecond)
		}
	}
}

// signalMember sends each of sigs to the process p names, by pid and start
// time, through a pidfd opened for it. The start time is read again after
// the pidfd is open: if it still matches, the pidfd holds the process the
// scan saw (its pid could not come back to it from anyone else), and no
// later holder of the pid can receive the signal.
func signalMember(p procInfo, sigs ...syscall.Signal) error {
	fd, err := unix.PidfdOpen(p.pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil
		}
		if !errors.Is(err, unix.ENOSYS) {
			return err
		}
		// No pidfds (Linux before 5.3): the start time, read just before,
		// is the only check.
		for _, sig := range sigs {
			if StartTime(p.pid) != p.start {
				return nil
			}
			if err := syscall.Kill(p.pid, sig); err != nil {
				return ignoreESRCH(err)
			}
		}
		return nil
	}
	defer unix.Close(fd)
	if StartTime(p.pid) != p.start {
		return nil // the pid is someone else's now
	}
	for _, sig := range sigs {
		if err := unix.PidfdSendSignal(fd, sig, nil, 0); err != nil {
			return ignoreESRCH(err)
		}
	}
	return nil
}

func ignoreESRCH(err error) error {
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}
