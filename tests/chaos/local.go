//go:build linux

package chaos

import (
	"os"
	"testing"
)

// LocalTiming is the suite's timeline on the local backend: etcd's. An
// flock has no expiry, but leaderrun keeps its deadline and its guard's
// kill point all the same (DESIGN §1.2, §1.9), and they are what the
// frozen-supervisor faults test.
var LocalTiming = EtcdTiming

// Local is the local backend: every host on this machine locks one file in
// one lock directory. There is no server to kill and no network to cut, so
// the faults that need one are not injected (fault.remote).
type Local struct {
	dir   string
	state string // the state directory, dir unless StartLocalAsRoot chose
}

// StartLocal makes the hosts' shared lock directory (it also holds the
// epoch counter).
func StartLocal(t testing.TB) Local { d := t.TempDir(); return Local{dir: d, state: d} }

// StartLocalAsRoot places the lock directory and the state directory as
// root's defaults do: the lock directory on /run's tmpfs, the state
// directory (the epoch's copy kept across reboots) on disk. Elsewhere, or
// for another user, it is StartLocal.
func StartLocalAsRoot(t testing.TB) Local {
	if os.Geteuid() != 0 {
		return StartLocal(t)
	}
	dir, err := os.MkdirTemp("/run", "leaderrun-chaos-")
	if err != nil {
		return StartLocal(t)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return Local{dir: dir, state: t.TempDir()}
}

// Name implements Cluster.
func (Local) Name() string { return "local" }

// Servers implements Cluster: none.
func (Local) Servers() int { return 0 }

// ServerAddr implements Cluster; there are no servers.
func (Local) ServerAddr(int) string { return "" }

// Protocol implements Cluster; nothing goes over a network.
func (Local) Protocol() Protocol { return Raw }

// Kill implements Cluster; there are no servers.
func (Local) Kill(int) {}

// Restart implements Cluster; there are no servers.
func (Local) Restart(int) {}

// WaitHealthy implements Cluster: a directory is always healthy.
func (Local) WaitHealthy(testing.TB) {}

// Timing implements Cluster.
func (Local) Timing() Timing { return LocalTiming }

// LeaderrunArgs implements Cluster: the shared lock directory, which also
// keeps the epoch (given explicitly, so nothing lands in the user's state
// directory).
func (l Local) LeaderrunArgs([]string) []string {
	return []string{"--backend", "local", "--lock-dir", l.dir, "--state-dir", l.state}
}

// HostServers implements Cluster: a host reaches no server, so its Link has
// no proxy and cutting it does nothing.
func (Local) HostServers(int) []int { return nil }
