//go:build linux

package contain

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// The cgroup a leaderrun keeps its jobs under is named
// leaderrun.<pid namespace>.<pid>. The namespace is part of the name because
// a pid means nothing outside its own namespace: a leaderrun in a PID
// namespace of its own (a container sharing the host's cgroup tree) must
// neither collide with another one's name nor judge it dead and remove it.

// ownerDirName names the job cgroup parent of the leaderrun with pid in
// this process's PID namespace.
func ownerDirName(pid int) string {
	return fmt.Sprintf("leaderrun.%s.%d", pidNamespace(), pid)
}

// OwnerPID reads the pid out of a name ownerDirName made. sameNS says
// whether that pid belongs to this process's PID namespace, the only one in
// which it may be checked.
func OwnerPID(name string) (pid int, sameNS, ok bool) {
	rest, found := strings.CutPrefix(name, "leaderrun.")
	if !found {
		return 0, false, false
	}
	ns, p, found := strings.Cut(rest, ".")
	if !found {
		return 0, false, false
	}
	n, err := strconv.Atoi(p)
	if err != nil || n <= 0 {
		return 0, false, false
	}
	return n, ns == pidNamespace(), true
}

// pidNamespace is the inode number of this process's PID namespace, or
// "unknown".
func pidNamespace() string {
	link, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return "unknown"
	}
	// "pid:[4026531836]"
	link = strings.TrimSuffix(strings.TrimPrefix(link, "pid:["), "]")
	if _, err := strconv.ParseUint(link, 10, 64); err != nil {
		return "unknown"
	}
	return link
}
