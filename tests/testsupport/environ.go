//go:build linux

package testsupport

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"time"
)

// Environ is the environment a live process started with, read from
// /proc/PID/environ; nil for a zombie, a process gone, or one not ours.
func Environ(pid int) map[string]string {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	if i := bytes.LastIndexByte(stat, ')'); i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' || stat[i+2] == 'X' {
		return nil
	}
	// A process in the middle of an exec has no environment to read for
	// a moment (a job's shell running `exec sleep`): read again while it
	// lives, so a caller does not take it for a process without one. A
	// kernel thread (PF_KTHREAD in its flags) never has one.
	const pfKthread = 0x00200000
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+2:]))
	if len(f) > 6 {
		if flags, err := strconv.ParseUint(f[6], 10, 64); err == nil && flags&pfKthread != 0 {
			return nil
		}
	}
	var b []byte
	for range 50 {
		b, err = os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		if err == nil && len(b) > 0 {
			break
		}
		// Mid-exec, the command line is not there yet either; a process
		// started with no environment at all has one.
		if cmd, cerr := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); cerr != nil || len(cmd) > 0 {
			return nil
		}
		time.Sleep(time.Millisecond)
	}
	if err != nil || len(b) == 0 {
		return nil
	}
	env := map[string]string{}
	for _, kv := range strings.Split(string(b), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}
