//go:build linux

package contain

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The registry of live jobs (DESIGN §1.9). A term's first child used to
// wait for a full sweep of /proc (two settled scans, 15-25ms on an idle
// host, up to a second on a busy one) although the sweep at leaderrun's
// start had just killed every leftover of the key. What can have been
// left since is a job of a leaderrun that died since, and every job a
// leaderrun of this user starts is registered before its first process
// exists: an empty file named by its token without the seal, in the
// key's directory live.KEY beside the marker key, removed only once the job is seen gone (Job.Remove, by
// its leaderrun or its guard) or by a sweep that killed it. Recheck reads
// that directory and the job cgroups' directories only: a job of a dead
// leaderrun of the key is there, or it was there when the start-up
// sweep ran, or it is not a job this user's leaderrun started.

// liveDir is the registry's directory of key (a key hash): one entry for
// each live job of the key, named by its token without the seal.
func liveDir(key string) string { return "live." + key }

// tokenKey is the KEY field of a token without its seal.
func tokenKey(base string) string { return base[strings.LastIndexByte(base, '.')+1:] }

// openLiveDir opens key's registry directory beside the marker key, made
// (0700) with create, and only if it is this user's and no one else may
// write in it.
func openLiveDir(key string, create bool) (int, error) {
	dfd, err := openPrivateDir(sealDir())
	if err != nil {
		return -1, err
	}
	defer unix.Close(dfd)
	if create {
		if err := unix.Mkdirat(dfd, liveDir(key), 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, err
		}
	}
	fd, err := unix.Openat(dfd, liveDir(key), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
		unix.Close(fd)
		return -1, fmt.Errorf("%s/%s is not a private directory of uid %d", sealDir(), liveDir(key), os.Geteuid())
	}
	return fd, nil
}

// register records tok's job as live, before its first process starts.
// Without a usable marker key (SealError), every Recheck of this process
// asks for a sweep, and the job is still registered where the directory
// has become this user's own since (made by this call, or by another
// leaderrun of the user that has a key): another user who made it first
// and removed it again must not leave this leaderrun's jobs out of the
// other leaderruns' Rechecks. Where it still cannot be had, nothing is
// registered: no leaderrun of this user has a registry there either.
func register(tok string) error {
	sealErr := SealError()
	if sealErr != nil {
		_ = os.Mkdir(sealDir(), 0o700)
	}
	base, _ := unseal(tok)
	fd, err := openLiveDir(tokenKey(base), true)
	if err == nil {
		unlock := lockTally(fd, unix.LOCK_EX)
		if err = writeFile(fd, base, nil, true, keptMode); err == nil {
			adjustTally(fd, base, true)
		}
		unlock()
		unix.Close(fd)
	}
	if err != nil && sealErr == nil {
		return fmt.Errorf("register the job in %s: %w", sealDir(), err)
	}
	return nil
}

// keptMode is an entry's and a stamp's mode: 0600 with the sticky bit,
// which systemd-tmpfiles reads as "never remove for its age". A user's
// registry is under /tmp, which it ages (10 days by default): an entry
// is never read once written, and the entry of a job that ran that long
// went, so a re-check missed what the job left once its leaderrun and
// guard were killed together.
const keptMode = 0o600 | unix.S_ISVTX

// unregister removes tok's entry: its job is gone.
func unregister(tok string) {
	base, _ := unseal(tok)
	fd, err := openLiveDir(tokenKey(base), false)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	defer lockTally(fd, unix.LOCK_EX)()
	_ = unix.Unlinkat(fd, base, 0)
	adjustTally(fd, base, false)
}

// The tally (tallyName) names the entries the registry should hold, one
// a line: register adds its entry's name, unregister takes it out (its
// job is gone, whether or not its entry was still there), both under
// the flock of the stamp, so that an entry removed by hand (an operator
// cleaning what the docs say stays behind, a cleaner of old files)
// shows as missing. A Recheck that finds an entry the tally names
// missing, or no tally, sweeps in full: the job of that entry may have
// been left behind since. Names, not a count: an entry the tally never
// counted (written by a leaderrun of the version before it, run beside
// this one during an upgrade, or by one killed between its entry and
// the tally) must not stand in for one removed. A Sweep sets the tally
// to the entries it leaves only when its scans found no live job of the
// key without an entry (spared), since every live job then has one (see
// recount).
const tallyName = "tally"

// lockTally takes the flock of registry directory dfd's stamp, how
// (LOCK_EX to change the entries and the tally, LOCK_SH to read them),
// and returns its release; without a stamp it holds nothing.
func lockTally(dfd, how int) func() {
	fd, err := unix.Openat(dfd, stampName, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return func() {}
	}
	for {
		if err := unix.Flock(fd, how); err != unix.EINTR {
			break
		}
	}
	return func() { unix.Close(fd) }
}

// maxTally bounds what readTally reads: 16384 names of about 60 bytes.
const maxTally = 1 << 20

// readTally reads the names of key's entries the tally of registry
// directory dfd holds; false if it is missing, unreadable or not such a
// list (a count written by an earlier version, an edit by hand).
func readTally(dfd int, key string) (map[string]bool, bool) {
	fd, err := unix.Openat(dfd, tallyName, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, false
	}
	f := os.NewFile(uintptr(fd), tallyName)
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTally+1))
	if err != nil || len(b) > maxTally {
		return nil, false
	}
	names := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" {
			continue
		}
		if _, ok := parseToken(line); !ok || tokenKey(line) != key {
			return nil, false
		}
		names[line] = true
	}
	return names, true
}

// setTally writes the tally of registry directory dfd: names.
func setTally(dfd int, names map[string]bool) {
	list := make([]string, 0, len(names))
	for n := range names {
		list = append(list, n+"\n")
	}
	slices.Sort(list)
	_ = writeFile(dfd, tallyName, []byte(strings.Join(list, "")), true, keptMode)
}

// adjustTally adds base to the tally of registry directory dfd, or takes
// it out, if there is a tally; the caller holds the stamp's flock.
func adjustTally(dfd int, base string, add bool) {
	names, ok := readTally(dfd, tokenKey(base))
	if !ok || names[base] == add {
		return
	}
	if add {
		names[base] = true
	} else {
		delete(names, base)
	}
	setTally(dfd, names)
}

// present lists the registry's entries of key among the names of its
// directory.
func present(names []string, key string) map[string]bool {
	out := map[string]bool{}
	for _, base := range names {
		if strings.HasSuffix(base, "."+key) {
			out[base] = true
		}
	}
	return out
}

// absent lists the names tally holds that are not entries in here.
func absent(tally, here map[string]bool) []string {
	var out []string
	for n := range tally {
		if !here[n] {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// recount sets the tally of key's registry to the entries it holds, if
// the directory is still the one id names and the caller knows every
// live job of the key has an entry (all), or if the sweep made id's
// stamp itself (fresh): no Recheck trusts a directory whose stamp no
// sweep read before, so none can be misled by what the tally leaves
// out. Never otherwise, not even where there is no tally: a job spared
// by the sweep without an entry may be one whose entry was removed by
// hand, with the tally before it (an operator emptying live.KEYHASH
// file by file), and a tally of the entries left would hide it from the
// Rechecks of every other leaderrun of the key, whose sweeps did not
// spare it; without a tally they sweep in full until a sweep finds
// every live job registered. before is what registeredTally read before
// the sweep's scans: an entry missing now that was not then was removed
// after the scans may have seen its job registered, and a tally gone now
// was removed during the sweep.
func recount(key string, id regID, all, fresh bool, before regState) {
	if !all && !fresh {
		return
	}
	fd, err := openLiveDir(key, false)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	defer lockTally(fd, unix.LOCK_EX)()
	if now, err := stamp(fd, false); err != nil || now != id || id == (regID{}) {
		return
	}
	names, err := readNames(fd)
	if err != nil {
		return
	}
	here := present(names, key)
	tally, ok := readTally(fd, key)
	if !ok && before.tallied && !fresh {
		return
	}
	for _, n := range absent(tally, here) {
		if !slices.Contains(before.gone, n) {
			return
		}
	}
	setTally(fd, here)
}

// readNames lists registry directory dfd's names.
func readNames(dfd int) ([]string, error) {
	d, err := unix.Openat(dfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(d), "registry")
	defer f.Close()
	return f.Readdirnames(-1)
}

// registered lists the tokens of the registry's entries of key (a key
// hash) whose leaderrun is dead, as leftoverOf judges them, and the
// identity of the directory it read (regID); with create it makes the
// directory and its stamp if they are missing, and a missing one is none
// (the zero regID).
func registered(key string, create bool) ([]string, regID, error) {
	st, err := registeredTally(key, create)
	return st.dead, st.id, err
}

// regState is what registeredTally read of a registry directory.
type regState struct {
	dead    []string // entries of dead leaderruns (registered)
	id      regID    // the directory's identity (registered)
	gone    []string // the names the tally holds that are not entries
	tallied bool     // whether it has a tally
	fresh   bool     // whether this call made its stamp
}

// missing reports whether an entry the tally names is missing, or there
// is no tally.
func (r regState) missing() bool { return !r.tallied || len(r.gone) > 0 }

// registeredTally is registered, and also reads the tally against the
// entries.
func registeredTally(key string, create bool) (regState, error) {
	if err := SealError(); err != nil {
		return regState{}, err
	}
	fd, err := openLiveDir(key, create)
	if !create && errors.Is(err, unix.ENOENT) {
		return regState{}, nil // no job of the key was ever registered, or it was removed
	}
	if err != nil {
		return regState{}, err
	}
	d := os.NewFile(uintptr(fd), liveDir(key))
	defer d.Close()
	var r regState
	r.id, err = stamp(fd, false)
	if err == nil && r.id == (regID{}) && create {
		r.fresh = true
		r.id, err = stamp(fd, true)
	}
	if err != nil {
		return regState{}, err
	}
	// The entries and the tally as one: no register or unregister between.
	defer lockTally(fd, unix.LOCK_SH)()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return regState{}, err
	}
	if tally, ok := readTally(fd, key); ok {
		r.tallied = true
		r.gone = absent(tally, present(names, key))
	}
	for _, base := range names {
		if !strings.HasSuffix(base, "."+key) {
			continue // writePrivate's file, not yet in place
		}
		if _, ok := leftoverOf(base, key); ok {
			r.dead = append(r.dead, base)
		}
	}
	return r, nil
}

// regID is a registry directory's identity: the random content of its
// stamp, a file a Sweep makes there if it is missing (an inode number is
// no identity: a disk's file system gives a removed directory's to the
// next one made). A Sweep keeps the one it read before its scans, and a
// Recheck that finds another or none (the directory was removed, by hand
// or by a cleaner, with the entries of live jobs in it, and maybe made
// again by the next register) sweeps in full: the entries of jobs that
// may have been left since can be gone.
type regID struct{ stamp string }

// stampName is the stamp's file in a registry directory; it never ends
// in a key hash, so it is no entry.
const stampName = "stamp"

// stamp reads the stamp of the registry directory dfd, made first with
// create if it is missing; the zero regID if it is missing.
func stamp(dfd int, create bool) (regID, error) {
	for range 3 {
		fd, err := unix.Openat(dfd, stampName, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if errors.Is(err, unix.ENOENT) {
			if !create {
				return regID{}, nil
			}
			v := make([]byte, 16)
			_, _ = rand.Read(v)
			if err := writeFile(dfd, stampName, []byte(hex.EncodeToString(v)), false, keptMode); err != nil && !errors.Is(err, unix.EEXIST) {
				return regID{}, err
			}
			continue
		}
		if err != nil {
			return regID{}, err
		}
		b := make([]byte, 64)
		n, err := unix.Read(fd, b)
		unix.Close(fd)
		if err != nil || n <= 0 {
			return regID{}, fmt.Errorf("the registry's stamp cannot be read: %v", err)
		}
		return regID{stamp: string(b[:n])}, nil
	}
	return regID{}, errors.New("the registry's stamp keeps vanishing")
}

// isRegistered reports whether the job whose token, unsealed, is base has
// its entry; false when that cannot be read.
func isRegistered(base string) bool {
	fd, err := openLiveDir(tokenKey(base), false)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	return unix.Faccessat(fd, base, unix.F_OK, unix.AT_SYMLINK_NOFOLLOW) == nil
}

// errNoRegistry: Recheck cannot vouch for the host; sweep.
var errNoRegistry = errors.New("the registry of live jobs cannot be read")

// Recheck reports why a leftover of this box's key could be on this host
// now, "" if none can, given that a Sweep since this process started found
// every leftover gone (it is the caller's to know that). It reads no scan
// of /proc: a job of a dead leaderrun of the key is registered (register)
// or in one of the job cgroups a Sweep looks at, or it is unregistered
// (a leaderrun of an older version, or of another user) and its
// leaderrun, alive at the last Sweep, has died since (spared); anything
// else of the key ran already when that Sweep did, which killed it, or is
// an unregistered job started since (see DESIGN §1.9 for that limit).
// Call Sweep when it returns a reason.
func (b *Box) Recheck() string {
	if b.opts.Key == "" || self().ns == "unknown" {
		return ""
	}
	key := keyHash(b.opts.Key)
	reg, err := registeredTally(key, false)
	dead, id := reg.dead, reg.id
	if err != nil {
		return fmt.Sprintf("%v: %v", errNoRegistry, err)
	}
	b.mu.Lock()
	swept := b.registry
	b.mu.Unlock()
	if id == (regID{}) || id != swept {
		return fmt.Sprintf("%s/%s is gone or not the one the last sweep read: it was deleted since, with what it named", sealDir(), liveDir(key))
	}
	if len(dead) > 0 {
		o, _ := parseToken(dead[0])
		return fmt.Sprintf("a job of leaderrun %d, which is dead, is registered (%s)", o.pid, dead[0])
	}
	if !reg.tallied {
		return fmt.Sprintf("%s/%s keeps no tally of its entries: one removed by hand with it would not show", sealDir(), liveDir(key))
	}
	if len(reg.gone) > 0 {
		return fmt.Sprintf("%s/%s holds %d entries fewer than were registered (removed by hand?), %s first: their jobs may have been left since", sealDir(), liveDir(key), len(reg.gone), reg.gone[0])
	}
	b.mu.Lock()
	spared := b.spared
	b.mu.Unlock()
	for _, o := range spared {
		if st, ok := readStat("/proc/" + strconv.Itoa(o.pid) + "/stat"); !ok || st.start != o.start || !ProcessAlive(o.pid) {
			return fmt.Sprintf("leaderrun %d, whose job is not registered, has died since the last sweep", o.pid)
		}
	}
	for _, c := range b.leftoverCgroups(key) {
		if c.populated {
			return fmt.Sprintf("a job cgroup of leaderrun %d, which is dead, is populated (%s)", c.owner.pid, c.dir)
		}
	}
	return ""
}

// forget removes the registry's entries of toks, once a Sweep that began
// after their leaderruns died has seen their jobs gone.
func forget(toks []string) {
	for _, t := range toks {
		unregister(t)
	}
}
