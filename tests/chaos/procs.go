//go:build linux

package chaos

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leaderrun/leaderrun/contain"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// ProcStat is what /proc says about one process.
type ProcStat struct {
	Pid   int
	State string // R, S, D, T, Z, ...; "" when the process is gone
	PPid  int
	PGid  int
	// CPU is user plus system time consumed so far.
	CPU time.Duration
}

// clockTick is the unit of utime and stime in /proc/<pid>/stat. Linux
// reports them in USER_HZ, which is 100 on every architecture Go supports.
const clockTick = 10 * time.Millisecond

// Stat reads /proc/<pid>/stat. ok is false when the process is gone.
func Stat(pid int) (ProcStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ProcStat{Pid: pid}, false
	}
	s := string(b)
	// The command name is in parentheses and may contain anything, so
	// fields are counted from the last ')'.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ProcStat{Pid: pid}, false
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return ProcStat{Pid: pid}, false
	}
	st := ProcStat{Pid: pid, State: f[0]}
	st.PPid, _ = strconv.Atoi(f[1])
	st.PGid, _ = strconv.Atoi(f[2])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	stm, _ := strconv.ParseInt(f[12], 10, 64)
	st.CPU = time.Duration(ut+stm) * clockTick
	return st, true
}

// Alive reports whether pid is a running (or stopped) process; zombies
// count as dead.
func Alive(pid int) bool {
	st, ok := Stat(pid)
	return ok && st.State != "Z" && st.State != "X" && st.State != "x"
}

// RSS is the resident set size of pid (VmRSS in /proc/<pid>/status).
func RSS(pid int) (int64, error) {
	m, err := Resident(pid)
	return m.RSS, err
}

// Memory is a process's resident memory, in bytes.
type Memory struct {
	// RSS is all of it (VmRSS): its private pages and the pages of files
	// it maps, the binary's among them, which the page cache shares with
	// every process that maps the same file.
	RSS int64
	// Anon is its anonymous part (RssAnon): heap, stacks and runtime
	// data, which no other process shares.
	Anon int64
}

// Resident reads pid's resident memory from /proc/PID/status.
func Resident(pid int) (Memory, error) {
	kb, err := ProcKB(pid, "status", "VmRSS", "RssAnon")
	if err != nil {
		return Memory{}, err
	}
	return Memory{RSS: kb["VmRSS"], Anon: kb["RssAnon"]}, nil
}

// ProcKB reads the "Name: N kB" lines called names from /proc/PID/file
// (status, smaps_rollup), in bytes; every one of them must be there.
func ProcKB(pid int, file string, names ...string) (map[string]int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/" + file)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, line := range strings.Split(string(b), "\n") {
		name, v, ok := strings.Cut(line, ":")
		if !ok || !slices.Contains(names, name) {
			continue
		}
		f := strings.Fields(v)
		if len(f) < 1 {
			return nil, fmt.Errorf("pid %d: an empty %s in %s", pid, name, file)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("pid %d: %s in %s: %w", pid, name, file, err)
		}
		out[name] = kb * 1024
	}
	for _, name := range names {
		if _, ok := out[name]; !ok {
			return nil, fmt.Errorf("pid %d: no %s in %s", pid, name, file)
		}
	}
	return out, nil
}

// Process is one live process found by Scan.
type Process struct {
	Pid     int
	PPid    int
	State   string
	Exe     string
	Cmdline []string
}

// String describes the process for messages.
func (p Process) String() string {
	return fmt.Sprintf("pid %d (parent %d, state %s): %s", p.Pid, p.PPid, p.State, strings.Join(p.Cmdline, " "))
}

// Scan lists the live (non-zombie) processes whose executable is one of
// exes. Binaries the tests build into their own temporary folders have
// paths no other process shares, so this finds exactly the processes a test
// started, and whatever they left behind.
func Scan(exes ...string) []Process {
	want := map[string]bool{}
	for _, e := range exes {
		want[e] = true
	}
	var out []Process
	for _, pid := range testsupport.Pids() {
		dir := "/proc/" + strconv.Itoa(pid)
		exe, err := os.Readlink(dir + "/exe")
		if err != nil {
			continue
		}
		exe = strings.TrimSuffix(exe, " (deleted)")
		if !want[exe] {
			continue
		}
		st, ok := Stat(pid)
		if !ok || st.State == "Z" || st.State == "X" {
			continue
		}
		cmd, _ := os.ReadFile(dir + "/cmdline")
		out = append(out, Process{Pid: pid, PPid: st.PPid, State: st.State, Exe: exe,
			Cmdline: strings.Split(strings.TrimRight(string(cmd), "\x00"), "\x00")})
	}
	return out
}

// IsGuard reports whether p is leaderrun's dead-man guard.
func (p Process) IsGuard() bool {
	return len(p.Cmdline) > 0 && p.Cmdline[0] == "leaderrun-guard"
}

// VoluntarySwitches sums voluntary_ctxt_switches over every thread of pid:
// how many times it went to sleep, so how often it woke.
func VoluntarySwitches(pid int) int64 {
	v, _ := ContextSwitches(pid)
	return v
}

// ContextSwitches sums voluntary_ctxt_switches and
// nonvoluntary_ctxt_switches over every thread of pid
// (/proc/PID/task/*/status: /proc/PID/status counts the main thread's
// only).
func ContextSwitches(pid int) (voluntary, nonvoluntary int64) {
	tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + t.Name() + "/status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
				k, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				voluntary += k
			} else if v, ok := strings.CutPrefix(line, "nonvoluntary_ctxt_switches:"); ok {
				k, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				nonvoluntary += k
			}
		}
	}
	return voluntary, nonvoluntary
}

// Machine describes this machine for reports: CPUs and memory.
func Machine() string {
	cpus := runtime.NumCPU() // what nproc prints: the CPUs this process may use
	model := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok && model == "" {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				f := strings.Fields(v)
				if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
					mem = fmt.Sprintf("%.1f GiB RAM", float64(kb)/(1<<20))
				}
			}
		}
	}
	s := fmt.Sprintf("%d CPUs (nproc), %s", cpus, mem)
	if model != "" {
		s += ", " + model
	}
	return s
}

// Getenv reads the variable name from pid's environment as the process was
// started with it (/proc/<pid>/environ); ok is false when it has none or the
// process is gone.
func Getenv(pid int, name string) (value string, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return "", false
	}
	for _, kv := range strings.Split(string(b), "\x00") {
		if v, found := strings.CutPrefix(kv, name+"="); found {
			return v, true
		}
	}
	return "", false
}

// JobMarker is leaderrun's job marker in pid's environment (the value of
// contain.EnvMarker, unique to one run of the child and inherited by every
// process of its job), "" if there is none or pid is gone.
func JobMarker(pid int) string {
	v, _ := Getenv(pid, contain.EnvMarker)
	return v
}
