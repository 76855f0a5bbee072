package systemdtest

// Tests of features that arrive with other changes to the package: the
// shared /etc/leaderrun/leaderrun.env, Delegate=yes with the job in its own
// cgroup, and --once-per behind a timer and service pair. Each asks the
// INSTALLED package whether it has the feature and skips, naming it, only
// when it does not; once the package has it, the test runs (under CI=true
// as everywhere else).

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// unpacked extracts the .deb once per test binary, so a test can ask what
// the package has before it boots anything.
var unpacked struct {
	once sync.Once
	dir  string
	err  error
}

func unpackedDeb(t *testing.T) string {
	t.Helper()
	deb := Package(t)
	unpacked.once.Do(func() {
		unpacked.dir, unpacked.err = os.MkdirTemp("", "leaderrun-deb-")
		if unpacked.err == nil {
			if out, err := exec.Command("dpkg-deb", "-x", deb, unpacked.dir).CombinedOutput(); err != nil {
				unpacked.err = fmt.Errorf("dpkg-deb -x %s: %v\n%s", deb, err, out)
			}
		}
	})
	if unpacked.err != nil {
		t.Fatal(unpacked.err)
	}
	return unpacked.dir
}

// packagedUnit is the package's leaderrun@.service.
func packagedUnit(t *testing.T) string {
	b, err := os.ReadFile(filepath.Join(unpackedDeb(t), "lib/systemd/system/leaderrun@.service"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// packageHasOption reports whether the packaged leaderrun knows a run option.
func packageHasOption(t *testing.T, name string) bool {
	// The full list is `help all`; a package from before it listed
	// everything in --help.
	out, _ := exec.Command(filepath.Join(unpackedDeb(t), "usr/bin/leaderrun"), "help", "all").CombinedOutput()
	if !regexp.MustCompile(`(^|[\s,])--ttl\b`).Match(out) {
		out, _ = exec.Command(filepath.Join(unpackedDeb(t), "usr/bin/leaderrun"), "--help").CombinedOutput()
	}
	return regexp.MustCompile(`(^|[\s,])--` + regexp.QuoteMeta(name) + `\b`).Match(out)
}

// sharedEnvUnit: the unit reads /etc/leaderrun/leaderrun.env.
var sharedEnvUnit = regexp.MustCompile(`(?m)^EnvironmentFile=-?/etc/leaderrun/leaderrun\.env$`)

// TestSharedEnvFile: with the settings shared by all instances in
// /etc/leaderrun/leaderrun.env and each key's own in KEY.env, an instance
// starts from those two files, and KEY.env wins where both set a variable.
func TestSharedEnvFile(t *testing.T) {
	if !sharedEnvUnit.MatchString(packagedUnit(t)) {
		t.Skip("the package has no shared /etc/leaderrun/leaderrun.env (EnvironmentFile= in leaderrun@.service)")
	}
	e := testcluster.StartEtcd(t, 1)
	m := leaderMachine(t)
	eps := strings.Join(e.Endpoints(), ",")
	m.WriteFile("/etc/leaderrun/leaderrun.env", envFile(map[string]string{
		"LEADERRUN_BACKEND": "local", "ETCDCTL_ENDPOINTS": eps,
	}), 0o600)
	m.WriteFile("/etc/leaderrun/billing.env", envFile(map[string]string{
		"LEADERRUN_BACKEND": "etcd", "LEADERRUN_COMMAND": "/usr/local/bin/job billing",
	}), 0o600)
	m.WriteFile("/etc/leaderrun/reports.env", envFile(map[string]string{
		"LEADERRUN_COMMAND": "/usr/local/bin/job reports",
	}), 0o600)
	epoch, _ := m.start("billing")
	m.start("reports")
	// billing leads on etcd (its own file overrides the shared backend and
	// the endpoints come from the shared one); reports on the local lock.
	if st := m.status("billing", map[string]string{"LEADERRUN_BACKEND": "etcd", "ETCDCTL_ENDPOINTS": eps}); !regexp.MustCompile(fmt.Sprintf(`"epoch":\s*%d\b`, epoch)).MatchString(st) {
		t.Errorf("billing does not lead on etcd with epoch %d: %s", epoch, st)
	}
	if st := m.status("reports", map[string]string{"LEADERRUN_BACKEND": "local"}); regexp.MustCompile(`"leader":\s*null`).MatchString(st) {
		t.Errorf("reports does not lead on the local backend: %s", st)
	}
}

// TestDelegatedCgroup: with Delegate=yes the job lives in its own cgroup
// below the unit's, and a daemon the job started with setsid (out of its
// process group) is dead once leaderrun has exited after a loss.
func TestDelegatedCgroup(t *testing.T) {
	if !regexp.MustCompile(`(?m)^Delegate=yes$`).MatchString(packagedUnit(t)) {
		t.Skip("the package's leaderrun@.service has no Delegate=yes (cgroup containment)")
	}
	if !packageHasOption(t, "contain") {
		t.Skip("the packaged leaderrun has no --contain (cgroup containment)")
	}
	e := testcluster.StartEtcd(t, 1)
	eps := strings.Join(e.Endpoints(), ",")
	m := leaderMachine(t)
	m.WriteFile("/usr/local/bin/daemonizing-job", `#!/bin/sh
setsid sh -c 'echo $$ >/var/tmp/daemon.pid; exec sleep 1000' </dev/null >/dev/null 2>&1 &
exec /usr/local/bin/job billing
`, 0o755)
	m.Configure("billing", map[string]string{"LEADERRUN_BACKEND": "etcd", "ETCDCTL_ENDPOINTS": eps},
		map[string]string{"LEADERRUN_COMMAND": "/usr/local/bin/daemonizing-job"}) // --contain auto, as packaged
	// systemd must not be the one that kills the daemon: without this its
	// KillMode=mixed would SIGKILL whatever leaderrun left behind.
	m.WriteFile("/etc/systemd/system/leaderrun@billing.service.d/no-backstop.conf", "[Service]\nKillMode=process\n", 0o644)
	m.MustRun("systemctl", "daemon-reload")
	epoch, child := m.start("billing")
	var daemon int
	m.Eventually("the daemon started", 10*time.Second, func() bool {
		daemon, _ = strconv.Atoi(strings.TrimSpace(m.ReadFile("/var/tmp/daemon.pid")))
		return daemon > 0
	})
	hostDaemon, hostChild := m.HostPID(daemon), m.HostPID(child)
	unitCG := m.Show("leaderrun@billing", "ControlGroup")
	for _, pid := range []int{hostChild, hostDaemon} {
		cg := unifiedCgroup(pid)
		if !strings.HasPrefix(cg, unitCG+"/") {
			t.Errorf("process %d is in cgroup %q, not below the unit's %q", pid, cg, unitCG)
		}
		if cg == unitCG+"/"+"leaderrun" || strings.HasSuffix(cg, "/supervisor") {
			t.Errorf("process %d shares leaderrun's own cgroup %q", pid, cg)
		}
	}
	if unifiedCgroup(hostChild) == unifiedCgroup(m.HostPID(mustAtoi(t, m.Show("leaderrun@billing", "MainPID")))) {
		t.Errorf("the job is in leaderrun's own cgroup %q", unifiedCgroup(hostChild))
	}

	// A loss: the key vanishes. leaderrun exits (123) only once the whole
	// job is gone, the setsid daemon included (DESIGN §1.4).
	hostMain := m.HostPID(mustAtoi(t, m.Show("leaderrun@billing", "MainPID")))
	cmd := exec.Command(testcluster.Bin(t, "etcdctl"), "--endpoints", eps, "del", "--prefix", "/leaderrun/billing/")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("etcdctl del: %v\n%s", err, out)
	}
	m.Eventually("leaderrun@billing lost and exited", 30*time.Second, func() bool {
		return !Alive(hostMain)
	})
	if Alive(hostDaemon) {
		t.Errorf("the setsid daemon (host PID %d) outlived leaderrun's exit after the loss", hostDaemon)
	}
	if again, _ := m.leading("billing", time.Minute); again <= epoch {
		t.Errorf("after the loss: epoch %d, was %d", again, epoch)
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return n
}

// unifiedCgroup is a process's cgroup v2 path ("0::PATH" in /proc/PID/cgroup).
func unifiedCgroup(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			return p
		}
	}
	return ""
}

// TestTimerRunsOncePerSlot: the README's timer and service pair, installed
// on two hosts that share an etcd, runs the job once in its slot: the
// second host finds the slot recorded and skips, and both services succeed.
func TestTimerRunsOncePerSlot(t *testing.T) {
	if !packageHasOption(t, "once-per") {
		t.Skip("the packaged leaderrun has no --once-per (cron and timers)")
	}
	e := testcluster.StartEtcd(t, 1)
	eps := strings.Join(e.Endpoints(), ",")
	// Slots are whole days in UTC; keep clear of the boundary.
	if left := time.Until(time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)); left < 3*time.Minute {
		time.Sleep(left + time.Second)
	}
	hosts := []*Machine{leaderMachine(t), leaderMachine(t)}
	for i, m := range hosts {
		m.WriteFile("/usr/local/bin/nightly-report", fmt.Sprintf("#!/bin/sh\necho \"ran on host %d epoch=$LEADER_EPOCH\" >>/var/tmp/report.log\nsleep 2\n", i), 0o755)
		m.WriteFile("/etc/systemd/system/nightly-report.service", `[Unit]
Description=Nightly report, once per day across hosts

[Service]
Type=oneshot
Environment=LEADERRUN_QUIET=1 LEADERRUN_ONCE_PER=24h LEADERRUN_BACKEND=etcd
Environment=ETCDCTL_ENDPOINTS=`+eps+`
ExecStart=/usr/bin/leaderrun --key nightly-report --acquire-timeout 2h -- /usr/local/bin/nightly-report
`, 0o644)
		// The README's timer fires at 03:07 UTC; this one at once.
		m.WriteFile("/etc/systemd/system/nightly-report.timer", `[Timer]
OnActiveSec=1s

[Install]
WantedBy=timers.target
`, 0o644)
		m.MustRun("systemctl", "daemon-reload")
	}
	for _, m := range hosts {
		m.MustRun("systemctl", "start", "nightly-report.timer")
	}
	for i, m := range hosts {
		m.Eventually(fmt.Sprintf("host %d's service ran", i), time.Minute, func() bool {
			return m.Show("nightly-report.service", "ExecMainExitTimestampMonotonic") != "0" &&
				m.Show("nightly-report.service", "ActiveState") != "activating"
		})
		if r := m.Show("nightly-report.service", "Result"); r != "success" {
			t.Errorf("host %d: nightly-report.service Result=%s\n%s", i, r, m.Journal("nightly-report.service"))
		}
	}
	var runs []string
	for _, m := range hosts {
		if log := strings.TrimSpace(m.ReadFile("/var/tmp/report.log")); log != "" {
			runs = append(runs, strings.Split(log, "\n")...)
		}
	}
	if len(runs) != 1 {
		t.Errorf("the job ran %d times in one slot, want once: %q", len(runs), runs)
	}
}
