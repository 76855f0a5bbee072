//go:build linux

package contain

import (
	"errors"
	"fmt"
	"os"
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
// Without a usable marker key (SealError) nothing is registered, and every
// Recheck of this user says so and asks for a sweep.
func register(tok string) error {
	if SealError() != nil {
		return nil
	}
	base, _ := unseal(tok)
	fd, err := openLiveDir(tokenKey(base), true)
	if err == nil {
		err = writePrivate(fd, base, nil, true)
		unix.Close(fd)
	}
	if err != nil {
		return fmt.Errorf("register the job in %s: %w", sealDir(), err)
	}
	return nil
}

// unregister removes tok's entry: its job is gone.
func unregister(tok string) {
	base, _ := unseal(tok)
	fd, err := openLiveDir(tokenKey(base), false)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	_ = unix.Unlinkat(fd, base, 0)
}

// registered lists the tokens of the registry's entries of key (a key
// hash) whose leaderrun is dead, as leftoverOf judges them.
func registered(key string) ([]string, error) {
	if err := SealError(); err != nil {
		return nil, err
	}
	fd, err := openLiveDir(key, false)
	if errors.Is(err, unix.ENOENT) {
		// A full sweep makes it (keepRegistry): gone since, it was
		// deleted by hand (rm -rf /run/leaderrun), with what it named.
		return nil, fmt.Errorf("%s/%s is gone: %w", sealDir(), liveDir(key), err)
	}
	if err != nil {
		return nil, err
	}
	d := os.NewFile(uintptr(fd), liveDir(key))
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	var dead []string
	for _, base := range names {
		if !strings.HasSuffix(base, "."+key) {
			continue // writePrivate's file, not yet in place
		}
		if _, ok := leftoverOf(base, key); ok {
			dead = append(dead, base)
		}
	}
	return dead, nil
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
	dead, err := registered(key)
	if err != nil {
		return fmt.Sprintf("%v: %v", errNoRegistry, err)
	}
	if len(dead) > 0 {
		o, _ := parseToken(dead[0])
		return fmt.Sprintf("a job of leaderrun %d, which is dead, is registered (%s)", o.pid, dead[0])
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

// keepRegistry makes key's registry directory once a full sweep has found
// every leftover of the key gone, so that a later Recheck that finds it
// missing knows it was deleted, entries and all, and sweeps in full.
func keepRegistry(key string) {
	if SealError() != nil {
		return
	}
	if fd, err := openLiveDir(key, true); err == nil {
		unix.Close(fd)
	}
}

// forget removes the registry's entries of toks, once a Sweep that began
// after their leaderruns died has seen their jobs gone.
func forget(toks []string) {
	for _, t := range toks {
		unregister(t)
	}
}
