//go:build linux

package contain

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// The registry of live jobs (DESIGN §1.9). A term's first child used to
// wait for a full sweep of /proc (two settled scans, 15-25ms on an idle
// host, up to a second on a busy one) although the sweep at leaderrun's
// start had just killed every leftover of the key. What can have been
// left since is a job of a leaderrun that died since, and every job a
// leaderrun of this user starts is registered before its first process
// exists: an empty file live.TOKEN (the token without its seal) beside
// the marker key, removed only once the job is seen gone (Job.Remove, by
// its leaderrun or its guard) or by a sweep that killed it. Recheck reads
// that directory and the job cgroups' directories only: a job of a dead
// leaderrun of the key is there, or it was there when the start-up
// sweep ran, or it is not a job this user's leaderrun started.

// liveName is the registry entry of the job whose token, unsealed, is base.
func liveName(base string) string { return "live." + base }

// register records tok's job as live, before its first process starts.
// Without a usable marker key (SealError) nothing is registered, and every
// Recheck of this user says so and asks for a sweep.
func register(tok string) error {
	if SealError() != nil {
		return nil
	}
	base, _ := unseal(tok)
	dfd, err := openPrivateDir(sealDir())
	if err != nil {
		return fmt.Errorf("register the job in %s: %w", sealDir(), err)
	}
	defer unix.Close(dfd)
	if err := writePrivate(dfd, liveName(base), nil, true); err != nil {
		return fmt.Errorf("register the job in %s: %w", sealDir(), err)
	}
	return nil
}

// unregister removes tok's entry: its job is gone.
func unregister(tok string) {
	base, _ := unseal(tok)
	dfd, err := openPrivateDir(sealDir())
	if err != nil {
		return
	}
	defer unix.Close(dfd)
	_ = unix.Unlinkat(dfd, liveName(base), 0)
}

// registered lists the tokens of the registry's entries of key (a key
// hash) whose leaderrun is dead, as leftoverOf judges them.
func registered(key string) ([]string, error) {
	if err := SealError(); err != nil {
		return nil, err
	}
	dfd, err := openPrivateDir(sealDir())
	if err != nil {
		return nil, err
	}
	d := os.NewFile(uintptr(dfd), sealDir())
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	var dead []string
	for _, n := range names {
		base, ok := strings.CutPrefix(n, "live.")
		if !ok || !strings.HasSuffix(base, "."+key) {
			continue
		}
		if _, ok := leftoverOf(base, key); ok {
			dead = append(dead, base)
		}
	}
	return dead, nil
}

// errNoRegistry: Recheck cannot vouch for the host; sweep.
var errNoRegistry = errors.New("the registry of live jobs cannot be read")

// Recheck reports why a leftover of this box's key could be on this host
// now, "" if none can, given that a Sweep since this process started found
// every leftover gone (it is the caller's to know that). It reads no
// /proc: a job of a dead leaderrun of the key is registered (register) or
// in one of the job cgroups a Sweep looks at; anything else of the key
// ran already when that Sweep did, which killed it, or was started by a
// leaderrun of another user, or of a version without the registry, which
// a Sweep would not have found either unless its job runs as this user
// (see DESIGN §1.9 for that limit). Call Sweep when it returns a reason.
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
