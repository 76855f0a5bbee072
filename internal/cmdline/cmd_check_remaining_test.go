//go:build linux

package cmdline

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/supervise"
)

// The deadline file as the job reads it: the stop point of each deadline
// leaderrun publishes, 0 once stopping, and the backend's view for another
// epoch or without the file.
func TestDeadlineFile(t *testing.T) {
	d, err := openDeadlineFile(&supervise.Config{SafetyMargin: time.Second, KillGrace: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	path := strings.TrimPrefix(d.env(), deadlineEnv+"=")
	ev := d.events()
	ev.Acquired(7, time.Now().Add(10*time.Second))

	left, by, err := leaseLeft(path, 7, locker.Holder{})
	if err != nil || left < 6*time.Second || left > 7*time.Second || !strings.Contains(by, "own deadline") {
		t.Fatalf("after acquiring with 10s: %v left by %q (%v), want 7s (10s - margin - kill grace) by leaderrun's own deadline", left, by, err)
	}
	ev.Renewed(time.Now().Add(4 * time.Second))
	if left, _, _ := leaseLeft(path, 7, locker.Holder{}); left > time.Second || left < 0 {
		t.Fatalf("after a renewal to 4s: %v left, want 1s", left)
	}
	if _, _, err := leaseLeft(path, 8, locker.Holder{}); err == nil {
		t.Fatal("another epoch, with a backend that does not tell: no error")
	}
	if left, by, err := leaseLeft(path, 8, locker.Holder{LeaseRemaining: 3 * time.Second}); err != nil || left != 3*time.Second || !strings.Contains(by, "backend") {
		t.Fatalf("another epoch: %v by %q (%v), want the backend's 3s", left, by, err)
	}
	ev.Stopping("lost", true)
	if left, by, err := leaseLeft(path, 7, locker.Holder{LeaseRemaining: time.Minute}); err != nil || left != 0 || !strings.Contains(by, "stopping") {
		t.Fatalf("once stopping: %v by %q (%v), want 0", left, by, err)
	}
	if _, _, err := leaseLeft("/proc/999999999/fd/3", 7, locker.Holder{}); !errors.Is(err, errNotLeader) {
		t.Fatalf("a file that is gone: %v, want not leader", err)
	}
	if b, err := os.ReadFile(path); err != nil || len(b) != deadlineLine {
		t.Fatalf("the file holds %d bytes (%v), want %d", len(b), err, deadlineLine)
	}
}
