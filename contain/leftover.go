//go:build linux

package contain

import (
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Leftovers (DESIGN §1.9): a job whose leaderrun and guard were both killed
// at once (`pkill -9 leaderrun` matches both names, an OOM kill of the
// group) keeps running, and on the local backend the lock is free at once.
// Every job therefore says who started it, for which key, in its marker and
// in its cgroup's name, and a leaderrun that has just won leadership kills
// what jobs of its key left behind on this host before it starts its own.
//
// A job's token is
//
//	PID.N.MONO.START.PIDNS.KEY
//
// PID, START and PIDNS name the leaderrun that started the job (its pid, its
// start time in clock ticks after boot, the inode of its PID namespace), N
// and MONO make the token unique, and KEY is a hash of Options.Key, so the
// job is known by its key even if it clears LEADER_KEY. The job's cgroup is
// named "job." followed by its token; its marker value is the token sealed
// (seal.go), PID.N-SEAL.MONO.START.PIDNS.KEY. That leaderrun is dead when no
// process of its PID namespace has that pid with that start time.

// SweepTimeout is how long Sweep waits for what it killed to be gone.
const SweepTimeout = 5 * time.Second

// self is this process as a token names it, read once.
var self = sync.OnceValue(func() (s struct {
	pid   int
	start uint64
	ns    string
}) {
	s.pid = os.Getpid()
	s.start = StartTime(s.pid)
	s.ns = pidNamespace()
	return s
})

// keyHash is the part of a token that names the key: 16 hex digits of
// FNV-1a, enough to tell the keys on one host apart.
func keyHash(key string) string {
	h := fnv.New64a()
	h.Write([]byte(key))
	return fmt.Sprintf("%016x", h.Sum64())
}

// newToken is the marker value of this box's job number n, sealed.
func (b *Box) newToken(n uint64) string {
	s := self()
	return sealed(fmt.Sprintf("%d.%d.%d.%d.%s.%s", s.pid, n, monoNow(), s.start, s.ns, keyHash(b.opts.Key)))
}

// owner is the leaderrun a token names.
type owner struct {
	pid   int
	start uint64
	ns    string
	key   string
}

// parseToken reads a token newToken made, sealed or not; older tokens
// (PID.N.MONO) do not name their key and are never judged.
func parseToken(tok string) (owner, bool) {
	f := strings.Split(tok, ".")
	if len(f) != 6 {
		return owner{}, false
	}
	pid, err1 := strconv.Atoi(f[0])
	start, err2 := strconv.ParseUint(f[3], 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 {
		return owner{}, false
	}
	return owner{pid: pid, start: start, ns: f[4], key: f[5]}, true
}

// leftoverOf reports whether tok names a job of key started by a leaderrun
// of this PID namespace that is dead (a pid of another namespace cannot be
// checked; a token that cannot be read is left alone).
func leftoverOf(tok, key string) (owner, bool) {
	o, ok := parseToken(tok)
	if !ok || o.key != key || o.ns != self().ns || o.ns == "unknown" {
		return o, false
	}
	if o.pid == self().pid && o.start == self().start {
		return o, false
	}
	st, ok := readStat("/proc/" + strconv.Itoa(o.pid) + "/stat")
	return o, !ok || st.start != o.start || !ProcessAlive(o.pid)
}

// Leftover is one job an earlier, dead leaderrun of the same key left
// running on this host.
type Leftover struct {
	// Owner is the dead leaderrun's pid.
	Owner int
	// Token is the job's marker value.
	Token string
	// Cgroup is the job's cgroup, "" if it was found by its marker alone.
	Cgroup string
	// Pids are the job's processes that were found alive.
	Pids []int
	// Comm is each of them's command (/proc/PID/comm), read when it was
	// found, before it was killed; "" where it could not be read.
	Comm map[int]string
	// Check: what a health check of the dead leaderrun left, found by
	// the check's marker (check.go), not a job.
	Check bool
}

// Processes are the leftover's processes with their commands, by pid.
func (l Leftover) Processes() []Process {
	out := make([]Process, 0, len(l.Pids))
	for _, pid := range l.Pids {
		out = append(out, Process{Pid: pid, Command: l.Comm[pid]})
	}
	return out
}

// Process is one process as a log line names it: "123 (sleep)".
type Process struct {
	Pid     int
	Command string // its comm, "" if unknown
}

func (p Process) String() string {
	if p.Command == "" {
		return strconv.Itoa(p.Pid)
	}
	return strconv.Itoa(p.Pid) + " (" + p.Command + ")"
}

// maxListed bounds how many processes ProcessList names.
const maxListed = 20

// ProcessList is ps for a log line: "123 (sleep), 124 (sh)", the first
// maxListed of them and how many more there are.
func ProcessList(ps []Process) string {
	var b strings.Builder
	for i, p := range ps {
		if i == maxListed {
			fmt.Fprintf(&b, " and %d more", len(ps)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(p.String())
	}
	return b.String()
}

// comm is pid's command name, "" if it cannot be read.
func comm(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Processes lists the job's live processes with their commands, for a log
// line that says what is killed. It reads /proc once more and changes
// nothing of what the job's own scans judge (see look).
func (j *Job) Processes() []Process {
	var pids []int
	if j.cgroup != "" {
		pids, _ = cgroupProcs(j.cgroup)
		pids = append(pids, j.Intruders()...)
	} else {
		pids = j.members()
	}
	return Named(pids)
}

// Named is each of pids with its command, once each, by pid.
func Named(pids []int) []Process {
	pids = slices.Compact(slices.Sorted(slices.Values(pids)))
	out := make([]Process, 0, len(pids))
	for _, pid := range pids {
		out = append(out, Process{Pid: pid, Command: comm(pid)})
	}
	return out
}

// members is group mode's list of the job's live processes from one scan
// of /proc, judged as look judges them but without counting the scan.
func (j *Job) members() []int {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.pgid <= 1 && j.token == "" {
		return nil
	}
	marked := map[int]bool{}
	me := os.Getpid()
	procs, _ := scanProcs(func(p procInfo) {
		if j.token != "" && p.start >= j.since && p.pid != me && hasMarker(p.pid, j.token) {
			marked[p.pid] = true
		}
	})
	var pids []int
	for _, m := range j.classify(procs, marked) {
		if ProcessAlive(m.pid) {
			pids = append(pids, m.pid)
		}
	}
	return pids
}

// Sweep kills every job that a dead leaderrun of this box's key (Options.Key)
// left on this host, waits until nothing of them can run, and returns what
// it found. Call it once leadership is won and before the first child
// starts: a leaderrun that holds the key's lock runs the only live job of
// that key on this host, and jobs of live leaderruns are never touched.
//
// It looks for processes carrying such a job's marker, and their
// descendants, in either mode; in cgroup mode also for such job cgroups
// where this box makes its own (see jobDirs). It returns an error, with
// what it found, if something was still alive after timeout.
func (b *Box) Sweep(timeout time.Duration) ([]Leftover, error) {
	if b.opts.Key == "" || self().ns == "unknown" {
		return nil, nil
	}
	key := keyHash(b.opts.Key)
	// Registered jobs of leaderruns dead before the first scan: once the
	// scans settle, their jobs are gone (registry.go).
	// The registry's directory, made if missing, is read before the
	// scans: Recheck trusts it only while it is this one (regID).
	before, rerr := registeredTally(key, true)
	dead, reg := before.dead, before.id
	if rerr != nil {
		reg = regID{}
	}
	found := map[string]*Leftover{}
	var order []string
	note := func(tok string, o owner) *Leftover {
		l := found[tok]
		if l == nil {
			l = &Leftover{Owner: o.pid, Token: tok, Comm: map[int]string{}, Check: IsCheckToken(tok)}
			found[tok] = l
			order = append(order, tok)
		}
		return l
	}
	var cgroups []string
	defer raisePriority()()
	sw := newSweeper(key)
	defer sw.cursor.close()
	quiet, calm, scans := 0, 0, 0
	settledScans, freeScans := 0, 0 // for the error
	begun := time.Now()
	end := begun.Add(timeout)
	for {
		scans++
		alive := 0
		for _, c := range b.leftoverCgroups(key) {
			if !slices.Contains(cgroups, c.dir) {
				cgroups = append(cgroups, c.dir)
			}
			if !c.populated {
				continue
			}
			alive++
			l := note(c.token, c.owner)
			if l.Cgroup == "" {
				l.Cgroup = c.dir
			}
			for _, pid := range treeProcs(c.dir) {
				if !slices.Contains(l.Pids, pid) {
					l.Pids = append(l.Pids, pid)
					l.Comm[pid] = comm(pid) // before the kill
				}
			}
			_ = (&Job{cgroup: c.dir, cgfd: -1, hasKill: b.hasKill}).killCgroup()
		}
		hits, settled, wrapFree := sw.look()
		for _, p := range hits {
			alive++
			l := note(p.token, p.owner)
			if !slices.Contains(l.Pids, p.pid) {
				l.Pids = append(l.Pids, p.pid)
				l.Comm[p.pid] = p.comm
			}
		}
		if settled {
			settledScans++
		}
		if wrapFree {
			freeScans++
		}
		if alive == 0 && wrapFree {
			calm++
		} else {
			calm = 0
		}
		if alive == 0 && settled {
			quiet++
		} else {
			quiet = 0
		}
		if quiet >= 2 || calm >= 2 {
			// Two settled scans in a row, or two in a row that found
			// nothing while no pid was handed out twice (see sweeper).
			break
		}
		if alive == 0 && (settled || wrapFree) {
			continue
		}
		if alive == 0 && len(found) == 0 && !sw.churn && scans >= noiseScans && (time.Since(begun) >= noiseBound || time.Now().After(end)) {
			// Nothing of the key was ever seen, and no process of a user
			// a leftover could run as died unseen: what kept the scans
			// from settling was pids gone before they could be read, a
			// busy host's or another user's (sweeper).
			break
		}
		if time.Now().After(end) {
			if alive == 0 {
				return list(found, order), fmt.Errorf("leftover jobs not seen gone after %s: processes kept exiting while /proc was read (%d scans, %d settled, %d wrap-free: %s)", timeout, scans, settledScans, freeScans, sw.cursor)
			}
			return list(found, order), fmt.Errorf("%d processes of leftover jobs still alive after %s", alive, timeout)
		}
		if alive > 0 {
			time.Sleep(10 * time.Millisecond)
		} else {
			time.Sleep(time.Millisecond)
		}
	}
	for _, dir := range cgroups {
		RemoveTree(dir)
		// The dead leaderrun's own directory of job cgroups, if it made one.
		parent := filepath.Dir(dir)
		if pid, sameNS, ok := OwnerPID(filepath.Base(parent)); ok && sameNS && b.ownsDir && parent != b.parent && !pidExists(pid) {
			RemoveTree(parent)
		}
	}
	forget(dead)
	// Every live job of the key has its entry, or no Recheck trusted
	// this directory before: the tally is what is there (registry.go).
	recount(key, reg, len(sw.spared) == 0, before.fresh, before)
	b.mu.Lock()
	b.spared = sw.sparedOwners()
	b.registry = reg
	b.mu.Unlock()
	return list(found, order), nil
}

func list(found map[string]*Leftover, order []string) []Leftover {
	out := make([]Leftover, 0, len(order))
	for _, tok := range order {
		l := *found[tok]
		slices.Sort(l.Pids)
		out = append(out, l)
	}
	return out
}

// leftoverCgroup is a job cgroup of a dead leaderrun of the key.
type leftoverCgroup struct {
	dir       string
	token     string
	owner     owner
	populated bool
}

// jobDirs are where this box's leaderrun would find job cgroups of its key
// that an earlier leaderrun made: its own parent of job cgroups (a unit's
// delegated cgroup stays the same across restarts), and beside it the
// others of its kind — leaderrun.NS.PID under the hierarchy's root, or
// leaderrun-KEY-PID.scope in the same slice, since a restarted leaderrun
// gets a scope of its own. A job cgroup elsewhere (a scope in another slice,
// a unit's cgroup left with KillMode=process under another unit) is found
// only by its processes' marker.
func (b *Box) jobDirs() []string {
	if b.mode != Cgroup || b.parent == "" {
		return nil
	}
	dirs := []string{b.parent}
	base, up := filepath.Base(b.parent), filepath.Dir(b.parent)
	var sibling func(name string) bool
	switch {
	case b.ownsDir:
		sibling = func(name string) bool {
			_, sameNS, ok := OwnerPID(name)
			return ok && sameNS
		}
	case strings.HasPrefix(base, "leaderrun-") && strings.HasSuffix(base, ".scope"):
		sibling = func(name string) bool {
			return strings.HasPrefix(name, "leaderrun-") && strings.HasSuffix(name, ".scope")
		}
	default:
		return dirs
	}
	entries, _ := os.ReadDir(up)
	for _, e := range entries {
		if e.IsDir() && e.Name() != base && sibling(e.Name()) {
			dirs = append(dirs, up+"/"+e.Name())
		}
	}
	return dirs
}

// leftoverCgroups lists the job cgroups of dead leaderruns of key, and the
// leaves of those leaderruns beside them.
func (b *Box) leftoverCgroups(key string) []leftoverCgroup {
	var out []leftoverCgroup
	for _, dir := range b.jobDirs() {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			tok, ok := strings.CutPrefix(e.Name(), "job.")
			if !ok || !e.IsDir() {
				continue
			}
			o, ok := leftoverOf(tok, key)
			if !ok {
				continue
			}
			// The dead leaderrun's own leaf beside its job cgroup: what is
			// left there came from its job (see Intruders).
			for _, cg := range []string{dir + "/" + e.Name(), dir + "/" + ownerDirName(o.pid)} {
				if cg == b.leafDir() || slices.ContainsFunc(out, func(c leftoverCgroup) bool { return c.dir == cg }) {
					continue
				}
				pop, err := populated(cg)
				if err != nil && errors.Is(err, os.ErrNotExist) {
					continue
				}
				out = append(out, leftoverCgroup{dir: cg, token: tok, owner: o, populated: pop || err != nil})
			}
		}
	}
	return out
}

// treeProcs lists the processes of cgroup dir and of its descendants.
func treeProcs(dir string) []int {
	pids, _ := cgroupProcs(dir)
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			pids = append(pids, treeProcs(dir+"/"+e.Name())...)
		}
	}
	return pids
}

// leftoverProc is a process of a dead leaderrun's job.
type leftoverProc struct {
	pid   int
	start uint64
	token string
	owner owner
	comm  string // read when first found, before it was signalled
}

// sweeper finds and kills the processes of the jobs of a key whose
// leaderrun is dead, scan after scan, and judges when none is left.
//
// A leftover job has no live leaderrun whose children it would be: its
// orphans went to init or some other subreaper. Its processes are known by
// their marker, by descent from one so known, or by an earlier scan of this
// sweep (same pid, same start time). One scan of /proc is no proof: a job
// whose processes each fork and exit within a millisecond (a relay, a
// daemon's double fork) has one process alive at every instant, and
// rarely the one a scan listed. The judgement is group mode's for a view
// that cannot count reaps (group.go): /proc is read an entry or two at a
// time, each process's stat and marker as soon as its pid is listed, so a
// process forked during the scan, which mostly gets a higher pid, is listed
// by the same scan; a scan is settled when it finds no live process of a
// leftover, no listed pid vanished before it could be read, no process
// died since the previous scan (a zombie, whose marker cannot be read, new
// since the last scan) and none of the last scan's finds was reaped since;
// and two settled scans in a row are needed.
//
// Or two scans in a row that find nothing while the kernel hands out pids
// upwards without wrapping round (pidCursor), from the first's start to the
// second's end, whatever died meanwhile. A process a scan misses though it
// lived through it was forked below the scan's position, so above the
// kernel's cursor (older than its last wrap), by a parent the scan had not
// read yet (else it was found and stopped): a parent older than the cursor
// too, which the first scan read alive if it lived through it. The second
// scan, then, has only younger parents to reckon with, whose children land
// above it, and lists every lineage of a leftover that lives through it. A
// busy host's deaths (another leaderrun's jobs exiting, each in a group of
// its own) need not stop for a moment, but pid_max pids take a while.
//
// Other users' processes are no leftovers unless they carry a sealed
// marker (seal.go): a marker without a good seal counts only on a process
// of leaderrun's own user, and a process found dead counts only if its
// real uid is leaderrun's user's or that of a leftover found by this sweep
// (a job may switch user in place), so that another user's processes dying
// by the thousand cannot keep every scan from settling, and only if it is
// no bystander's own child (bystanders). The real uid, not
// the effective one: any user can start a set-user-ID-root program that
// exits at once, and its zombie's effective uid is root's, but its real
// uid stays the user's who started it. Pids gone before
// they could be read may be anyone's: they unsettle a scan, but a sweep
// that never found anything of the key and saw no process of those users
// die ends after noiseBound and noiseScans as if settled.
type sweeper struct {
	key     string
	mine    map[int]bool // this process and its ancestors
	carried []string     // the markers this process carries itself
	judged  map[string]owner
	seen    map[int]leftoverProc // the finds of the last scan
	zombies map[int]uint64       // the dead processes of the last scan
	users   map[int]bool         // leaderrun's user and the leftovers' users
	ended   int64                // the youngest job of the key seen gone (seal.go)
	checked int64                // the youngest health check of the key seen gone
	// churn: a scan was unsettled by a process of those users (a find, or
	// one found dead), not only by pids gone before they were read.
	churn bool
	// spared: the live leaderruns of the key's jobs that are not
	// registered (registry.go), by token; unregistered: whether a token
	// of a live leaderrun is not registered, as first read.
	spared       map[string]owner
	unregistered map[string]bool
	cursor       *pidCursor // nil if it cannot be read
}

// sparedOwners are the leaderruns of the unregistered jobs the sweep left
// alone, each once.
func (s *sweeper) sparedOwners() []owner {
	var out []owner
	for _, o := range s.spared {
		if !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	return out
}

// noteSpared remembers base's leaderrun if it is a live leaderrun of the
// key (not this one) and base is not registered: a Recheck must see it
// die (registry.go).
func (s *sweeper) noteSpared(base string) {
	if _, done := s.unregistered[base]; done {
		return
	}
	o, ok := parseToken(base)
	live := ok && o.key == s.key && o.ns == self().ns && o.ns != "unknown" && !(o.pid == self().pid && o.start == self().start)
	s.unregistered[base] = live && !isRegistered(base)
	if s.unregistered[base] {
		s.spared[base] = o
	}
}

// A sweep that has found nothing of its key, and was kept from settling
// only by pids gone before they could be read, ends after noiseBound and
// at least noiseScans scans: a leftover's processes, even a relay of
// sub-millisecond hops, are read alive by nearly every scan. (Under such
// noise a scan is slow: it goes on listing the pids forked meanwhile, a few
// hundred milliseconds each with thousands a second.)
const (
	noiseBound = time.Second
	noiseScans = 2
)

func newSweeper(key string) *sweeper {
	me := self().pid
	s := &sweeper{key: key, mine: map[int]bool{me: true}, carried: markers(me), judged: map[string]owner{}, users: map[int]bool{os.Geteuid(): true}, ended: endedUpTo(key, false), checked: endedUpTo(key, true),
		spared: map[string]owner{}, unregistered: map[string]bool{}, cursor: openPidCursor()}
	for p := me; p > 1; {
		st, ok := readStat("/proc/" + strconv.Itoa(p) + "/stat")
		if !ok || s.mine[st.ppid] {
			break
		}
		p = st.ppid
		s.mine[p] = true
	}
	return s
}

// leftover reports whether pid carries the marker of a job of the key whose
// leaderrun is dead, sealed or on a process of leaderrun's own user, and
// returns the job's token without its seal. A marker this process carries
// itself (it was started from inside such a job: a job that ran leaderrun
// for its own key, which won once that job's leaderrun died) marks the dead
// job's other processes all the same, but not this process's own
// descendants, which inherit it.
func (s *sweeper) leftover(pid int) (string, owner, bool) {
	own := -1 // unknown yet
	for _, tok := range markers(pid) {
		base, sl := unseal(tok)
		o, ok := s.judged[base]
		if !ok {
			if o, ok = leftoverOf(base, s.key); ok {
				s.judged[base] = o // a dead leaderrun stays dead
			}
		}
		if !ok {
			s.noteSpared(base)
			continue
		}
		if slices.Contains(s.carried, tok) && s.descendant(pid) {
			continue
		}
		if own < 0 {
			own = 0
			if r, e, known := uids(pid); known && r == os.Geteuid() && e == os.Geteuid() {
				own = 1
			}
		}
		switch {
		case own == 1:
		case !sealGood(base, sl):
			continue // another user's, unsealed or forged
		case !IsCheckToken(base) && jobMono(base) <= s.ended,
			IsCheckToken(base) && jobMono(base) <= s.checked:
			continue // another user's copy of a job or check seen over (seal.go)
		}
		return base, o, true
	}
	return "", owner{}, false
}

// descendant reports whether pid descends from this process.
func (s *sweeper) descendant(pid int) bool {
	me := self().pid
	for range 4096 {
		st, ok := readStat("/proc/" + strconv.Itoa(pid) + "/stat")
		if !ok || st.ppid <= 1 {
			return false
		}
		if st.ppid == me {
			return true
		}
		pid = st.ppid
	}
	return false
}

// look scans /proc once. Every leftover process is SIGSTOPped as soon as it
// is read, and SIGKILLed once the scan is over (through a pidfd, see
// signalFound): a stopped process forks no more, and unlike a killed one it
// stays the parent of its children, so a child without a marker listed
// after it is still known by descent (killing at once re-parented it to
// init first, and the scan lost it). It returns those it found alive and
// whether the scan is settled, and whether it found nothing while no pid
// was handed out twice since the previous scan's end (see sweeper).
func (s *sweeper) look() (hits []leftoverProc, settled, wrapFree bool) {
	found := map[int]leftoverProc{}
	take := func(p procInfo, tok string, o owner) {
		f := leftoverProc{pid: p.pid, start: p.start, token: tok, owner: o}
		if prev, ok := s.seen[p.pid]; ok && prev.start == p.start {
			f.comm = prev.comm
		}
		found[p.pid] = f
		if r, e, known := uids(p.pid); known {
			s.users[r], s.users[e] = true, true
		}
		if ProcessAlive(p.pid) {
			signalFound(p.pid, p.start, syscall.SIGSTOP)
			if f.comm == "" {
				// Stopped, it forks no more while its name is read.
				f.comm = comm(p.pid)
				found[p.pid] = f
			}
			hits = append(hits, f)
		}
	}
	defer func() {
		for _, f := range hits {
			signalFound(f.pid, f.start, syscall.SIGKILL)
		}
	}()
	zombies := map[int]uint64{}
	listed := map[int]procInfo{}
	settled = true
	wrapped := s.cursor.mark()
	procs, vanished := scanProcs(func(p procInfo) {
		listed[p.pid] = p
		if len(listed)%8 == 0 && s.cursor.mark() {
			wrapped = true
		}
		if s.mine[p.pid] {
			return
		}
		if prev, ok := s.seen[p.pid]; ok && prev.start == p.start {
			take(p, prev.token, prev.owner)
			return
		}
		if parent, ok := found[p.ppid]; ok && p.start >= parent.start {
			take(p, parent.token, parent.owner)
			return
		}
		if (p.state == 'Z' || p.state == 'X') && !ProcessAlive(p.pid) {
			// Dead, its marker unreadable: it may have been a leftover
			// that forked before it died, if it was started by one of
			// the users a leftover runs as (its real uid, sweeper).
			r, _, known := uids(p.pid)
			switch {
			case !known:
				settled = false // reaped as it was read: a pid gone
				return
			case !s.users[r]:
				return
			case s.bystanders(p, listed, found):
				return
			}
			zombies[p.pid] = p.start
			if st, ok := s.zombies[p.pid]; !ok || st != p.start {
				settled, s.churn = false, true
			}
			return
		}
		if tok, o, ok := s.leftover(p.pid); ok {
			take(p, tok, o)
		}
	})
	// Descendants listed before their parent (a lower pid).
	for more := true; more; {
		more = false
		for _, p := range procs {
			parent, ok := found[p.ppid]
			if _, done := found[p.pid]; !ok || done || s.mine[p.pid] || p.start < parent.start {
				continue
			}
			take(p, parent.token, parent.owner)
			more = true
		}
	}
	if len(hits) > 0 {
		settled, s.churn = false, true
	}
	if vanished > 0 {
		settled = false
	}
	for pid, prev := range s.seen {
		if f, ok := found[pid]; !ok || f.start != prev.start {
			settled, s.churn = false, true // reaped since the last scan, maybe during this one
		}
	}
	// The next scan checks the finds that still live: one dead already
	// forks no more, and its reaping, by init at its own pace, hides
	// nothing.
	seen := map[int]leftoverProc{}
	for pid, f := range found {
		if ProcessAlive(pid) {
			seen[pid] = f
			continue
		}
		if st, ok := s.zombies[pid]; !ok || st != f.start {
			settled, s.churn = false, true // died since the last scan
		}
		zombies[pid] = f.start
	}
	s.seen, s.zombies = seen, zombies
	if s.cursor.mark() {
		wrapped = true
	}
	return hits, settled, !wrapped && len(hits) == 0
}

// bystanders reports whether the dead process z is the own child of a
// live process that is no leftover: its parent, not init and not found by
// this scan, is in z's process group. Every job runs in a process group
// of its own (supervise's Setpgid), and its processes make new groups only
// of their own pids (setpgid, setsid), so a leftover's group is one a
// leftover made; a live parent in it is a leftover itself, found by this
// scan if it carries the marker, and beyond any sweep if it does not
// (group mode's limit, DESIGN §1.9). A leftover adopted once its parent
// died has a subreaper or init for parent, in a group of their own: it
// still counts. Without this, a busy host's own dying processes (a build's
// compilers, a shell's commands), or another user's churn slowing every
// scan, kept every sweep from settling (TestLocalOtherUserZombieChurnBlocksJob).
func (s *sweeper) bystanders(z procInfo, listed map[int]procInfo, found map[int]leftoverProc) bool {
	if z.ppid <= 1 || s.mine[z.ppid] {
		return false
	}
	if _, ok := found[z.ppid]; ok {
		return false
	}
	q, ok := listed[z.ppid]
	if !ok {
		st, read := readStat("/proc/" + strconv.Itoa(z.ppid) + "/stat")
		if !read {
			return false
		}
		q = procInfo{pid: z.ppid, ppid: st.ppid, pgid: st.pgid, start: st.start, state: st.state}
	}
	return q.state != 'Z' && q.state != 'X' && q.pgid == z.pgid && q.start <= z.start
}

// signalFound sends sig to pid through a pidfd, once the pidfd is known to
// be the process that was found (same start time), so a reused pid is never
// hit.
func signalFound(pid int, start uint64, sig syscall.Signal) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if !errors.Is(err, unix.ESRCH) && StartTime(pid) == start {
			_ = syscall.Kill(pid, sig)
		}
		return
	}
	defer unix.Close(fd)
	if StartTime(pid) == start {
		_ = unix.PidfdSendSignal(fd, sig, nil, 0)
	}
}

// Intruders in leaderrun's own cgroup: in a delegated subtree a job run as
// leaderrun's user owns every cgroup.procs there, leaderrun's leaf
// (leaderrun.NS.PID) included, and may move its processes into it, out of
// its job cgroup. Whatever else than leaderrun, the processes it started
// (Options.Known, its guard) and, in the guard's view, the guard itself is
// found in that leaf is counted as part of the running job: signalled,
// killed, and waited for with it.

// leafDir is leaderrun's own leaf cgroup, where it moved itself beside its
// job cgroups; "" where it stays where it was (the root cgroup).
func (b *Box) leafDir() string {
	if b.mode != Cgroup || b.ownsDir || b.parent == "" {
		return ""
	}
	return b.parent + "/" + ownerDirName(self().pid)
}

// guardLeaf is, in the guard's view, the leaf of the leaderrun that started
// it, if the guard runs there: a guard inherits its leaderrun's cgroup.
func guardLeaf() string {
	dir, err := OwnCgroupDir()
	if err != nil {
		return ""
	}
	if pid, sameNS, ok := OwnerPID(filepath.Base(dir)); ok && sameNS && pid == os.Getppid() {
		return dir
	}
	return ""
}

// Intruders lists the processes of leaderrun's own leaf cgroup (and any
// cgroup beneath it) that are neither leaderrun, nor started by it, nor
// this process, nor children that those in the leaf started (a guard's
// `leaderrun __release`); in cgroup mode they came from a job. Orphans re-parented to leaderrun, a
// subreaper, are not its own: they count.
func (j *Job) Intruders() []int {
	if j.leaf == "" {
		return nil
	}
	owner, _, _ := OwnerPID(filepath.Base(j.leaf))
	var known func(int) bool
	if j.box != nil {
		known = j.box.opts.Known
	}
	me := os.Getpid()
	pids := treeProcs(j.leaf)
	checks := checkOf(owner)
	ours := func(pid int) bool {
		if pid == me || pid == owner || (known != nil && known(pid)) {
			return true
		}
		if checks != nil && checks(pid) {
			// A health check's (check.go), run in the leaf where it
			// has no cgroup of its own (group mode).
			return true
		}
		// The guard's view: its own children; leaderrun's: its guard's.
		// The child's children are the job's, and leaderrun's are orphans.
		st, _ := readStat("/proc/" + strconv.Itoa(pid) + "/stat")
		return (j.box == nil && st.ppid == me) ||
			(st.ppid != owner && known != nil && known(st.ppid) && slices.Contains(pids, st.ppid))
	}
	var out []int
	for _, pid := range pids {
		if !ours(pid) && ProcessAlive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// signalIntruders sends sig to each intruder.
func (j *Job) signalIntruders(sig syscall.Signal) {
	for _, pid := range j.Intruders() {
		_ = signalPid(pid, sig)
	}
}

// waitIntruders waits until no intruder is left or end passes.
func (j *Job) waitIntruders(end time.Time) bool {
	for len(j.Intruders()) > 0 {
		if time.Now().After(end) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}
