package systemdtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// newerDeb repacks deb with a higher version, as the next release would
// be: same files, version 99.0.0.
func newerDeb(t *testing.T, deb string) string {
	t.Helper()
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	if out, err := exec.Command("dpkg-deb", "-R", deb, tree).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -R: %v\n%s", err, out)
	}
	control := filepath.Join(tree, "DEBIAN", "control")
	b, err := os.ReadFile(control)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "Version:") {
			l = "Version: 99.0.0"
		}
		lines = append(lines, l)
	}
	if err := os.WriteFile(control, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "leaderrun_99.0.0_"+arch(deb)+".deb")
	if b, err := exec.Command("dpkg-deb", "-Zgzip", "-z1", "-b", "--root-owner-group", tree, out).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -b: %v\n%s", err, b)
	}
	return out
}

func arch(deb string) string {
	base := strings.TrimSuffix(filepath.Base(deb), ".deb")
	return base[strings.LastIndexByte(base, '_')+1:]
}

// TestUpgradeRemovePurge: upgrading the package under a running leader
// restarts nothing (README "Operating it"): the same leaderrun, child and
// epoch run on, with the old binary, until the operator restarts the
// instance. Removing the package stops running instances cleanly (their
// jobs get the stop signal, the units end inactive) and keeps the
// configuration and root's epoch counters in /var/lib/leaderrun; purging
// deletes both but not the operator's own KEY.env.
func TestUpgradeRemovePurge(t *testing.T) {
	deb := Package(t)
	out, err := exec.Command("dpkg-deb", "-I", deb, "conffiles").Output()
	if err != nil {
		t.Fatalf("dpkg-deb -I %s conffiles: %v", deb, err)
	}
	conffiles := strings.Fields(string(out))
	if len(conffiles) == 0 {
		t.Fatalf("%s has no conffiles", deb)
	}
	m := leaderMachine(t)
	if out, err := m.Run("dpkg-query", "-S", "/var/lib/leaderrun"); err != nil || !strings.HasPrefix(out, "leaderrun: ") {
		t.Errorf("dpkg-query -S /var/lib/leaderrun: %q %v, want the package to own it", out, err)
	}
	m.Configure("billing", map[string]string{"LEADERRUN_BACKEND": "local"}, nil)
	epoch, child := m.start("billing")
	mainPID := m.Show("leaderrun@billing", "MainPID")
	n, _ := strconv.Atoi(mainPID)
	hostMain, hostChild := m.HostPID(n), m.HostPID(child)
	if hostMain == 0 || hostChild == 0 {
		t.Fatalf("host PIDs of leaderrun %d / child %d not found", n, child)
	}

	// Upgrade.
	newer := newerDeb(t, deb)
	step := time.Now()
	m.Install(newer)
	t.Logf("dpkg -i (upgrade) took %v", time.Since(step).Round(time.Millisecond))
	if v := m.MustRun("dpkg-query", "-W", "-f", "${Version}", "leaderrun"); v != "99.0.0" {
		t.Fatalf("installed version %q after the upgrade", v)
	}
	time.Sleep(2 * time.Second) // a restart, if anything asked for one, would show by now
	if got := m.Show("leaderrun@billing", "MainPID"); got != mainPID {
		t.Errorf("the upgrade restarted leaderrun: MainPID %s, was %s", got, mainPID)
	}
	if e, c := m.leading("billing", time.Second); e != epoch || c != child {
		t.Errorf("after the upgrade: epoch %d child %d, was epoch %d child %d", e, c, epoch, child)
	}
	if log := m.ReadFile("/var/tmp/billing.log"); strings.Contains(log, "term") {
		t.Errorf("the upgrade stopped the job:\n%s", log)
	}
	if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", hostMain)); !strings.HasSuffix(exe, " (deleted)") {
		t.Errorf("leaderrun runs %q: the upgrade did not replace /usr/bin/leaderrun", exe)
	}
	if got := m.Show("leaderrun@billing", "NeedDaemonReload"); got != "no" {
		t.Errorf("NeedDaemonReload=%s after the upgrade", got)
	}

	// Remove: running instances are stopped first (the preremove script),
	// cleanly, while their unit is still there; the configuration stays.
	step = time.Now()
	m.MustRun("dpkg", "-r", "leaderrun")
	t.Logf("dpkg -r took %v", time.Since(step).Round(time.Millisecond))
	for _, f := range []string{"/usr/bin/leaderrun", "/lib/systemd/system/leaderrun@.service"} {
		if _, err := os.Stat(filepath.Join(m.Root, f)); err == nil {
			t.Errorf("%s still there after dpkg -r", f)
		}
	}
	for _, f := range append(conffiles, "/etc/leaderrun/billing.env") {
		if _, err := os.Stat(filepath.Join(m.Root, f)); err != nil {
			t.Errorf("dpkg -r removed the configuration %s", f)
		}
	}
	if log := m.ReadFile("/var/tmp/billing.log"); !strings.Contains(log, fmt.Sprintf("term %d\n", child)) {
		t.Errorf("dpkg -r: the job never got the stop signal:\n%s", log)
	}
	if !poll(5*time.Second, func() bool { return !GroupAlive(hostChild) && !Alive(hostMain) }) {
		t.Errorf("dpkg -r left leaderrun or its job running")
	}
	if got := m.Show("leaderrun@billing", "ActiveState"); got != "inactive" {
		t.Errorf("after dpkg -r: ActiveState=%s Result=%s, want inactive", got, m.Show("leaderrun@billing", "Result"))
	}

	// Removing keeps root's epoch counters (the instance's is in
	// /var/lib/leaderrun: its lock directory, /run/leaderrun, is tmpfs).
	if out, err := m.Run("find", "/var/lib/leaderrun", "-type", "f"); err != nil || strings.TrimSpace(out) == "" {
		t.Errorf("after dpkg -r, /var/lib/leaderrun holds no epoch counter: %v %q", err, out)
	}

	// Purge: the packaged conffiles and root's epoch counters go, the
	// operator's file stays.
	m.MustRun("dpkg", "--purge", "leaderrun")
	if _, err := os.Stat(filepath.Join(m.Root, "/var/lib/leaderrun")); err == nil {
		t.Error("/var/lib/leaderrun still there after purge")
	}
	for _, f := range conffiles {
		if _, err := os.Stat(filepath.Join(m.Root, f)); err == nil {
			t.Errorf("%s still there after purge", f)
		}
	}
	if _, err := os.Stat(filepath.Join(m.Root, "/etc/leaderrun/billing.env")); err != nil {
		t.Error("purge deleted the operator's /etc/leaderrun/billing.env")
	}
	if out, err := m.Run("dpkg", "-s", "leaderrun"); err == nil {
		t.Errorf("dpkg -s after purge:\n%s", out)
	}
}
