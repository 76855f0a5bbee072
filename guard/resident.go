//go:build linux

package guard

import (
	"bufio"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// TrimResident gives back what start-up touched once and never needs again.
//
// Every linked package's init runs at start (in leaderrun the etcd, Consul,
// ZooKeeper and Kubernetes clients, Prometheus, protobuf descriptors; in
// leaderrun-guard the TLS and network code of a direct release), touching
// read-only pages of the binary that stay counted in the process's RSS
// although only a little of that code runs after.
// The process drops its mapping of those pages (madvise MADV_DONTNEED on the
// binary's read-only, file-backed mappings); a page needed later is mapped
// again from the page cache, which all leaderruns on the host share. Pages
// that a mapping holds privately (relocations of a dynamically linked
// build: "Anonymous" in smaps) would be lost, so such mappings are left
// alone. It also returns the heap garbage of start-up to the kernel.
// docs/results/bench-2026-12-01-footprint.md has the before and after.
func TrimResident() {
	debug.FreeOSMemory()
	var exe syscall.Stat_t
	if err := syscall.Stat("/proc/self/exe", &exe); err != nil {
		return
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return
	}
	defer f.Close()
	type mapping struct {
		lo, hi uintptr
		ok     bool // read-only, the binary's file, nothing private
	}
	var ms []mapping
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) >= 5 && strings.Contains(fields[0], "-") && len(fields[1]) == 4 {
			lo, hi, _ := strings.Cut(fields[0], "-")
			a, err1 := strconv.ParseUint(lo, 16, 64)
			b, err2 := strconv.ParseUint(hi, 16, 64)
			ino, err3 := strconv.ParseUint(fields[4], 10, 64)
			ms = append(ms, mapping{
				lo: uintptr(a), hi: uintptr(b),
				ok: err1 == nil && err2 == nil && err3 == nil && ino == exe.Ino &&
					fields[1][1] == '-' && fields[1][3] == 'p',
			})
			continue
		}
		if len(ms) > 0 && len(fields) >= 2 && fields[0] == "Anonymous:" && fields[1] != "0" {
			ms[len(ms)-1].ok = false
		}
	}
	if sc.Err() != nil {
		return
	}
	for _, m := range ms {
		if m.ok && m.hi > m.lo {
			// Raw: the range is not Go memory, so no slice over it.
			_, _, _ = unix.Syscall(unix.SYS_MADVISE, m.lo, m.hi-m.lo, unix.MADV_DONTNEED)
		}
	}
}
