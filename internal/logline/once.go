package logline

import (
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// FirstThisBoot reports whether this is the first time since the machine
// booted that it is asked about what (for example a warning and the path
// of the binary it is about), so that a warning a cron job would mail on
// every run is given once per boot and logged below --quiet after that.
//
// It keeps a marker per what in the runtime directory: $XDG_RUNTIME_DIR/
// leaderrun where that directory exists, /run/leaderrun for root,
// /tmp/leaderrun-UID otherwise. The marker holds the boot id, so a /tmp that survives a
// reboot does not hide the first warning after it. Where no marker can be
// kept it answers true: better a repeated warning than none.
func FirstThisBoot(what string) bool {
	dir, err := runtimeDir()
	if err != nil {
		return true
	}
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return true
	}
	boot = bytes.TrimSpace(boot)
	h := fnv.New64a()
	h.Write([]byte(what))
	marker := filepath.Join(dir, fmt.Sprintf("said.%016x", h.Sum64()))
	if old, err := os.ReadFile(marker); err == nil && bytes.Equal(bytes.TrimSpace(old), boot) {
		return false
	}
	tmp := marker + "." + strconv.Itoa(os.Getpid())
	if err := os.WriteFile(tmp, append(boot, '\n'), 0o600); err == nil {
		if os.Rename(tmp, marker) != nil {
			_ = os.Remove(tmp)
		}
	}
	return true
}

// runtimeDir is leaderrun's directory for what lasts until the next boot,
// made if missing; one in a shared place (/tmp) must be this user's own
// directory, not a link.
func runtimeDir() (string, error) {
	var dir string
	xdg := os.Getenv("XDG_RUNTIME_DIR")
	if st, err := os.Stat(xdg); xdg == "" || err != nil || !st.IsDir() {
		xdg = ""
	}
	switch {
	case xdg != "":
		dir = filepath.Join(xdg, "leaderrun")
	case os.Geteuid() == 0:
		dir = "/run/leaderrun"
	default:
		dir = filepath.Join(os.TempDir(), "leaderrun-"+strconv.Itoa(os.Geteuid()))
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return "", err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !st.IsDir() || !ok || int(sys.Uid) != os.Geteuid() || st.Mode().Perm()&0o022 != 0 {
		return "", fmt.Errorf("%s is not a private directory of this user", dir)
	}
	return dir, nil
}
