package testsupport

import (
	"os"
	"strconv"
)

// Pids lists the processes in /proc now, live or not, in no particular
// order: the start of every scan a test makes of what runs on the machine.
func Pids() []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}
