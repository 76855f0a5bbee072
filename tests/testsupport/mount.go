//go:build linux

package testsupport

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// ReadOnlyTmpfs mounts an empty read-only tmpfs on dir, making dir first
// if it is missing, and unmounts it when the test ends (before a TempDir
// that holds it is removed). On a read-only mount even root, whom file
// modes do not stop, can write nothing. The test is skipped where mounting
// is not permitted.
func ReadOnlyTmpfs(t testing.TB, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "size=64k,mode=0755"); err != nil {
		t.Skipf("cannot mount a read-only tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
}
