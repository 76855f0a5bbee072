//go:build linux

// Package systemdtest proves the packaged leaderrun under a real systemd.
//
// These machines have no systemd as PID 1, but one boots as PID 1 of a PID
// namespace: Boot mounts an overlay on the cached Debian root that
// scripts/systemd-root.sh builds (so every boot starts from the pristine
// root and the cache is never written), runs boot.sh in
// `unshare --pid --fork --mount --uts --ipc`, and waits until systemd says
// it is running. The network namespace is shared, so an etcd started by
// tests/testcluster on the host's loopback is reachable from the units.
// Tests drive it as an operator would, with systemctl, journalctl and dpkg
// entered through nsenter.
//
// Everything is torn down when the test ends, even when it fails: systemd's
// PID 1 is killed (which kills every process of the namespace), the cgroup
// directories it made are removed depth first in the unified and the
// name=systemd hierarchies, and the overlay is unmounted.
//
// Needs root, the root built by `make systemd-root` and the .deb built by
// `make packages` (LEADERRUN_PACKAGE_DIR). A missing piece skips with a
// hint, except under CI=true, where it fails the test.
package systemdtest

import (
	"bufio"
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testsupport"
)

//go:embed boot.sh
var bootScript string

// RootEnv names the directory of the cached root (default bin/.systemd-root
// at the repository root); PackageEnv the directory holding the built .deb.
const (
	RootEnv    = "LEADERRUN_SYSTEMD_ROOT"
	PackageEnv = "LEADERRUN_PACKAGE_DIR"
)

// unavailable skips the test, or fails it under CI=true, where a skipped
// integration test would hide a broken setup step.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("systemdtest: "+format, args...)
	}
	t.Skipf("systemdtest: "+format, args...)
}

// Machine is one booted systemd.
type Machine struct {
	t       testing.TB
	Root    string // the overlay's merged root, as seen from the host
	PID     int    // systemd's PID (PID 1 inside), as seen from the host
	unified string // the cgroup v2 directory made for this boot
	named   string // the name=systemd directory made for this boot, if any
}

var boots atomic.Int64

// Boot starts a systemd and returns once `systemctl is-system-running`
// reports running or degraded.
func Boot(t testing.TB) *Machine {
	t.Helper()
	if os.Geteuid() != 0 {
		unavailable(t, "booting systemd needs root")
	}
	for _, tool := range []string{"unshare", "nsenter", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			unavailable(t, "%s is missing: run scripts/install-deps.sh", tool)
		}
	}
	lower := RootDir(t)
	unified, named, err := cgroupMounts()
	if err != nil {
		unavailable(t, "%v", err)
	}

	dir := t.TempDir()
	m := &Machine{t: t, Root: filepath.Join(dir, "root")}
	for _, d := range []string{"upper", "work", "root"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s/upper,workdir=%s/work", lower, dir, dir)
	if err := syscall.Mount("overlay", m.Root, "overlay", 0, opts); err != nil {
		unavailable(t, "overlay mount on %s: %v", m.Root, err)
	}
	t.Cleanup(m.teardown) // registered first, so it runs after the tests' own cleanups

	name := fmt.Sprintf("leaderrun-systemdtest-%d-%d", os.Getpid(), boots.Add(1))
	m.unified = filepath.Join(unified, name)
	if err := os.Mkdir(m.unified, 0o755); err != nil {
		t.Fatal(err)
	}
	if named != "" {
		m.named = filepath.Join(named, name)
		if err := os.Mkdir(m.named, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// journald must not read the host's kernel log (the machine shares /dev).
	m.WriteFile("/etc/systemd/journald.conf.d/test.conf", "[Journal]\nReadKMsg=no\n", 0o644)
	script := filepath.Join(dir, "boot.sh")
	if err := os.WriteFile(script, []byte(bootScript), 0o755); err != nil {
		t.Fatal(err)
	}
	console, err := os.Create(filepath.Join(dir, "console"))
	if err != nil {
		t.Fatal(err)
	}
	defer console.Close()
	cmd := exec.Command("unshare", "--pid", "--fork", "--mount", "--uts", "--ipc", "--kill-child",
		"/bin/sh", script, m.Root, m.unified, m.named)
	cmd.Stdout, cmd.Stderr = console, console
	// If the test binary dies, unshare dies, and --kill-child takes systemd.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("unshare: %v", err)
	}
	go func() { _ = cmd.Wait() }()

	// systemd is unshare's only child, PID 1 of the new namespace.
	children := fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid)
	m.Eventually("systemd's PID 1 started", 10*time.Second, func() bool {
		b, _ := os.ReadFile(children)
		m.PID, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		if m.PID == 0 {
			return false
		}
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", m.PID))
		return strings.HasSuffix(exe, "/systemd")
	})
	start := time.Now()
	var state string
	ok := poll(60*time.Second, func() bool {
		out, _ := m.Run("systemctl", "is-system-running", "--wait")
		state = strings.TrimSpace(out)
		return state == "running" || state == "degraded"
	})
	if !ok {
		b, _ := os.ReadFile(console.Name())
		failed, _ := m.Run("systemctl", "--failed", "--no-pager")
		t.Fatalf("systemd did not come up (state %q)\nconsole:\n%s\nfailed units:\n%s", state, b, failed)
	}
	t.Logf("systemd up (%s) in %v, PID %d", state, time.Since(start).Round(time.Millisecond), m.PID)
	return m
}

// RootDir returns the cached root, skipping (or failing under CI=true) when
// it has not been built.
func RootDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv(RootEnv)
	if dir == "" {
		root, err := repoRoot()
		if err != nil {
			unavailable(t, "%v", err)
		}
		dir = filepath.Join(root, "bin", ".systemd-root")
	}
	if _, err := os.Stat(filepath.Join(dir, ".stamp")); err != nil {
		unavailable(t, "no systemd root at %s: run `make systemd-root` (scripts/systemd-root.sh)", dir)
	}
	return dir
}

// Package returns the .deb that `make packages` built.
func Package(t testing.TB) string {
	t.Helper()
	dir := os.Getenv(PackageEnv)
	if dir == "" {
		unavailable(t, "%s is not set: run `make systemd-test` or `make test`", PackageEnv)
	}
	m, _ := filepath.Glob(filepath.Join(dir, "leaderrun_*.deb"))
	if len(m) != 1 {
		unavailable(t, "want exactly one leaderrun_*.deb in %s, found %v: run `make packages`", dir, m)
	}
	return m[0]
}

// Run runs a command inside the machine (its mount, PID, root and working
// directory) and returns its combined output.
func (m *Machine) Run(args ...string) (string, error) {
	cmd := exec.Command("nsenter", append([]string{"-t", strconv.Itoa(m.PID), "-m", "-p", "-r", "-w", "--"}, args...)...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "SYSTEMD_PAGER=", "LANG=C"}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// MustRun is Run that fails the test on an error.
func (m *Machine) MustRun(args ...string) string {
	m.t.Helper()
	out, err := m.Run(args...)
	if err != nil {
		m.t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// WriteFile writes a file into the machine's root.
func (m *Machine) WriteFile(path, content string, mode os.FileMode) {
	m.t.Helper()
	full := filepath.Join(m.Root, path)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		m.t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(content), mode); err != nil {
		m.t.Fatal(err)
	}
}

// ReadFile reads a file of the machine's root ("" if it is missing).
func (m *Machine) ReadFile(path string) string {
	b, _ := os.ReadFile(filepath.Join(m.Root, path))
	return string(b)
}

// Install copies a .deb into the machine and installs it with dpkg -i.
func (m *Machine) Install(deb string) {
	m.t.Helper()
	b, err := os.ReadFile(deb)
	if err != nil {
		m.t.Fatal(err)
	}
	inside := "/var/tmp/" + filepath.Base(deb)
	m.WriteFile(inside, string(b), 0o644)
	// As apt does unattended: keep the operator's edited configuration files.
	m.MustRun("dpkg", "--force-confdef", "--force-confold", "-i", inside)
}

// Show returns one property of a unit (systemctl show -p NAME --value).
func (m *Machine) Show(unit, prop string) string {
	out, _ := m.Run("systemctl", "show", "-p", prop, "--value", unit)
	return strings.TrimSpace(out)
}

// Journal returns the unit's journal lines with extra journalctl arguments.
func (m *Machine) Journal(unit string, args ...string) string {
	out, _ := m.Run(append([]string{"journalctl", "--no-pager", "-o", "cat", "-u", unit}, args...)...)
	return out
}

// Eventually polls cond until it holds, failing the test after timeout.
func (m *Machine) Eventually(what string, timeout time.Duration, cond func() bool) {
	m.t.Helper()
	if !poll(timeout, cond) {
		m.t.Fatalf("not within %v: %s", timeout, what)
	}
}

func poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// HostPID maps a PID inside the machine to the host's PID (0 if none).
func (m *Machine) HostPID(inner int) int {
	for _, pid := range testsupport.Pids() {
		ns := nsPIDs(pid)
		if len(ns) == 2 && ns[1] == inner && m.inMachine(pid) {
			return pid
		}
	}
	return 0
}

// inMachine reports whether a host PID belongs to this machine's PID
// namespace (that of its PID 1).
func (m *Machine) inMachine(pid int) bool {
	a, err1 := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	b, err2 := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", m.PID))
	return err1 == nil && err2 == nil && a == b
}

// nsPIDs reads the NSpid line of a process: its PID in each nested
// namespace, outermost first.
func nsPIDs(pid int) []int {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "NSpid:"); ok {
			var out []int
			for _, f := range strings.Fields(rest) {
				n, _ := strconv.Atoi(f)
				out = append(out, n)
			}
			return out
		}
	}
	return nil
}

// Alive reports whether a host PID is a live process: it exists and is
// not a zombie (a killed child whose parent has not reaped it is dead).
func Alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}

// GroupAlive reports whether any process of the process group pgid (host
// PIDs) is alive.
func GroupAlive(pgid int) bool {
	for _, pid := range testsupport.Pids() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		// After "pid (comm) ": state ppid pgrp ...
		f := strings.Fields(s[i+1:])
		if len(f) >= 3 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" && f[0] != "X" {
			return true
		}
	}
	return false
}

// teardown kills the namespace, removes its cgroups and unmounts the root.
func (m *Machine) teardown() {
	t := m.t
	if m.PID > 0 {
		if t.Failed() {
			units, _ := m.Run("systemctl", "list-units", "--all", "--no-pager", "leaderrun*")
			out, _ := m.Run("journalctl", "--no-pager", "-n", "200", "-u", "leaderrun*")
			t.Logf("at failure:\n%s\njournal of leaderrun units:\n%s", units, out)
		}
		_ = syscall.Kill(m.PID, syscall.SIGKILL) // the kernel kills the rest of the namespace
		if !poll(10*time.Second, func() bool { return !Alive(m.PID) && emptyTree(m.unified) }) {
			t.Errorf("systemdtest: processes of PID %d outlived its SIGKILL", m.PID)
		}
	}
	for _, dir := range []string{m.unified, m.named} {
		if dir == "" {
			continue
		}
		if !poll(5*time.Second, func() bool { return removeTree(dir) == nil }) {
			t.Errorf("systemdtest: cannot remove cgroup %s: %v", dir, removeTree(dir))
		}
	}
	if !poll(5*time.Second, func() bool {
		err := syscall.Unmount(m.Root, 0)
		return err == nil || err == syscall.EINVAL // EINVAL: not mounted
	}) {
		if err := syscall.Unmount(m.Root, syscall.MNT_DETACH); err != nil {
			t.Errorf("systemdtest: unmount %s: %v", m.Root, err)
		}
	}
}

// emptyTree reports whether no process is left in a cgroup tree.
func emptyTree(dir string) bool {
	empty := true
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "cgroup.procs" {
			if b, _ := os.ReadFile(path); len(strings.TrimSpace(string(b))) > 0 {
				empty = false
			}
		}
		return nil
	})
	return empty
}

// removeTree removes a cgroup directory and its children, deepest first
// (cgroup directories hold only kernel files and are removed with rmdir).
func removeTree(dir string) error {
	if _, err := os.Stat(dir); os.IsNotExist(err) {
		return nil
	}
	var dirs []string
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	var first error
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := syscall.Rmdir(dirs[i]); err != nil && first == nil && !os.IsNotExist(err) {
			first = fmt.Errorf("rmdir %s: %w", dirs[i], err)
		}
	}
	return first
}

// cgroupMounts finds the cgroup v2 mount and the name=systemd v1 mount (""
// on a pure cgroup v2 system) in /proc/self/mountinfo.
func cgroupMounts() (unified, named string, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [TAGS] - FSTYPE SOURCE SUPEROPTS
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		a, b := strings.Fields(pre), strings.Fields(post)
		if len(a) < 5 || len(b) < 3 || a[3] != "/" {
			continue
		}
		switch {
		case b[0] == "cgroup2" && unified == "":
			unified = a[4]
		case b[0] == "cgroup" && strings.Contains(","+b[2]+",", ",name=systemd,") && named == "":
			named = a[4]
		}
	}
	if unified == "" {
		return "", "", fmt.Errorf("no cgroup v2 mount in /proc/self/mountinfo")
	}
	return unified, named, sc.Err()
}

// repoRoot walks up from the working directory to the repository root,
// the folder holding scripts/systemd-root.sh.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "scripts", "systemd-root.sh")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no scripts/systemd-root.sh above the working directory")
		}
		dir = parent
	}
}
