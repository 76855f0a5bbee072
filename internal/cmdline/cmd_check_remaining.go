//go:build linux

package cmdline

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/leaderrun/leaderrun/internal/exitcode"
	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/supervise"
)

// deadlineEnv names, in the child's environment, the file where leaderrun
// keeps its current stop point (docs/FENCING.md, "How much lease is left").
const deadlineEnv = "LEADERRUN_DEADLINE_FILE"

// deadlineLine is the size of the file's one record, padded with spaces:
// one write at offset 0 replaces it whole.
const deadlineLine = 64

// remainingFlags are check's --min-remaining.
func remainingFlags() []cli.Flag {
	return []cli.Flag{&cli.DurationFlag{Name: "min-remaining", Category: catQuery, EnvVars: []string{"LEADERRUN_MIN_REMAINING"},
		Usage: "exit 1 unless epoch N has at least `D` of its lease left (inside the job: until leaderrun would start stopping it)"}}
}

// checkRemaining is the --min-remaining half of `leaderrun check`, once the
// backend said that epoch leads as holder h. Inside the job the holder's own
// deadline rules, read from leaderrun's deadline file; elsewhere what the
// backend shows (Holder.LeaseRemaining).
func checkRemaining(c *cli.Context, key string, epoch uint64, h locker.Holder) error {
	if !c.IsSet("min-remaining") {
		return nil
	}
	want := c.Duration("min-remaining")
	if want < 0 {
		return usage(fmt.Errorf("--min-remaining must not be negative, got %v", want))
	}
	left, by, err := leaseLeft(os.Getenv(deadlineEnv), epoch, h)
	switch {
	case errors.Is(err, errNotLeader):
		fmt.Fprintf(errorOutput(), "leaderrun: %s\n", oneLine(err))
		return exitCode(exitcode.CheckNotLeader)
	case err != nil:
		return usage(fmt.Errorf("check key %q: --min-remaining: %w", key, err))
	case left < want:
		fmt.Fprintf(errorOutput(), "leaderrun: epoch %d leads key %q with %s left (by %s), less than --min-remaining %s\n",
			epoch, key, roundDuration(max(left, 0)), by, roundDuration(want))
		return exitCode(exitcode.CheckNotLeader)
	}
	return nil
}

// leaseLeft is how long epoch has left and whose view says so. The deadline
// file, when it names epoch, is the holder's own deadline; an unreadable one
// means the leaderrun that ran this job is gone.
func leaseLeft(path string, epoch uint64, h locker.Holder) (time.Duration, string, error) {
	if path != "" {
		e, stopAt, err := readDeadlineFile(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return 0, "", fmt.Errorf("%w: epoch %d: the leaderrun that started this job is gone (%s)", errNotLeader, epoch, path)
		case err != nil:
			return 0, "", err
		case e == epoch && stopAt == 0:
			return 0, "leaderrun's own deadline (it is stopping the job)", nil
		case e == epoch:
			return time.Duration(stopAt - monoNow()), "leaderrun's own deadline", nil
		}
		// The file speaks of another leadership: only the backend can tell.
	}
	if h.LeaseRemaining <= 0 {
		return 0, "", errors.New("the backend does not say how much of a lease is left; run the check inside the job, where leaderrun's own deadline is known")
	}
	return h.LeaseRemaining, "the backend's lease", nil
}

// deadlineFile publishes the supervisor's stop point to its job: a memfd
// that the job reads through /proc/<leaderrun's pid>/fd/<n>. It is rewritten
// on every acquisition, renewal and stop, and vanishes with leaderrun, so a
// job whose leaderrun died reads nothing rather than an old deadline.
type deadlineFile struct {
	f                  *os.File
	timeline           func(deadline time.Time) supervise.StopTimeline
	epoch              uint64
	writeErrorReported bool
}

// openDeadlineFile creates the file for a supervisor with sup's timing.
func openDeadlineFile(sup *supervise.Config) (*deadlineFile, error) {
	fd, err := unix.MemfdCreate("leaderrun-deadline", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("deadline file: %w", err)
	}
	d := &deadlineFile{f: os.NewFile(uintptr(fd), "leaderrun-deadline"), timeline: sup.Timeline}
	d.put(0, 0)
	return d, nil
}

// env is the child's variable naming the file.
func (d *deadlineFile) env() string {
	return fmt.Sprintf("%s=/proc/%d/fd/%d", deadlineEnv, os.Getpid(), d.f.Fd())
}

// events keep the file current: the stop point of each new deadline, 0 once
// the stop sequence began.
func (d *deadlineFile) events() supervise.Events {
	return supervise.Events{
		Acquired: func(epoch uint64, deadline time.Time) {
			d.epoch = epoch
			d.publish(deadline)
		},
		Renewed:  d.publish,
		Stopping: func(string, bool) { d.put(d.epoch, 0) },
		Released: func() { d.put(0, 0) },
	}
}

// publish writes the stop point of deadline (its timeline's TermAt, when
// the job gets its stop signal) on CLOCK_MONOTONIC, the clock Go's
// monotonic readings come from.
func (d *deadlineFile) publish(deadline time.Time) {
	stop := d.timeline(deadline).TermAt()
	d.put(d.epoch, max(1, monoNow()+int64(time.Until(stop))))
}

func (d *deadlineFile) put(epoch uint64, stopAt int64) {
	line := fmt.Sprintf("epoch %d stop %d", epoch, stopAt)
	buf := []byte(line + strings.Repeat(" ", deadlineLine-1-len(line)) + "\n")
	if _, err := d.f.WriteAt(buf, 0); err != nil && !d.writeErrorReported {
		d.writeErrorReported = true
		fmt.Fprintf(errorOutput(), "leaderrun: deadline file: %v\n", err)
	}
}

func (d *deadlineFile) Close() error { return d.f.Close() }

// readDeadlineFile reads the record until two reads agree, so a write in
// between is never taken half. stopAt 0: no deadline (stopping, or not
// leading).
func readDeadlineFile(path string) (epoch uint64, stopAt int64, err error) {
	var last []byte
	for range 20 {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0, 0, err
		}
		if last != nil && string(b) == string(last) {
			return parseDeadline(b)
		}
		last = b
	}
	return 0, 0, fmt.Errorf("deadline file %s keeps changing", path)
}

func parseDeadline(b []byte) (uint64, int64, error) {
	f := strings.Fields(string(b))
	if len(f) != 4 || f[0] != "epoch" || f[2] != "stop" {
		return 0, 0, fmt.Errorf("deadline file: unexpected content %q", strings.TrimSpace(string(b)))
	}
	epoch, err1 := strconv.ParseUint(f[1], 10, 64)
	stop, err2 := strconv.ParseInt(f[3], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, fmt.Errorf("deadline file: %w", err)
	}
	return epoch, stop, nil
}

// monoNow reads CLOCK_MONOTONIC in nanoseconds: one clock for leaderrun and
// every process of its job.
func monoNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}
