//go:build linux

package supervise

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/leaderrun/leaderrun/contain"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// withArg lists the live processes that have arg as one word of their
// command line.
func withArg(arg string) []int {
	var out []int
	for _, pid := range testsupport.Pids() {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if err == nil && contain.ProcessAlive(pid) && strings.Contains("\x00"+string(b), "\x00"+arg+"\x00") {
			out = append(out, pid)
		}
	}
	return out
}

// daemonUp is shell that waits until the daemon the script started last
// ($!) is running as a session leader of its own: setsid(1) execs sleep
// only after setsid(2). Each check's daemon is then detached from the
// check's process group before the check ends, whatever the machine's
// load, without a fixed sleep.
const daemonUp = `until [ "$(cat /proc/$!/comm 2>/dev/null)" = sleep ]; do sleep 0.005; done; `

// One check of each kind, each starting a real setsid daemon that holds
// its output open, in each containment mode: the check ends with its shell
// (or its timeout, or its context), its result is the shell's, and
// nothing of it is left once it returned. The two modes run side by
// side, each with its own box and daemons of their own; both boxes are
// opened before either runs a check (a cgroup box may move this process
// into a leaf of its cgroup first).
func TestHealthCheckDaemonContained(t *testing.T) {
	for m, mode := range []contain.Mode{contain.Cgroup, contain.Group} {
		box, err := contain.Open(mode, contain.Options{AdoptOrphans: true, Known: Started, Reaped: Reaped, HoldReaps: HoldReaps})
		t.Run(string(mode), func(t *testing.T) {
			if err != nil {
				t.Skipf("no %s containment here: %v", mode, err)
			}
			defer func() {
				if err := box.Close(); err != nil {
					t.Error(err)
				}
			}()
			t.Parallel()
			for i, tc := range []struct {
				name, script string
				timeout      time.Duration
				cancel       bool // once the daemon runs
				ok           bool
				err, out     string
			}{
				{name: "passes", script: daemonUp + "echo fine; exit 0", timeout: 5 * time.Second, ok: true, out: "fine"},
				{name: "fails", script: daemonUp + "echo sick; exit 1", timeout: 5 * time.Second, err: "exited 1", out: "sick"},
				{name: "times out", script: daemonUp + "sleep 30", timeout: 100 * time.Millisecond, err: "timed out after 100ms"},
				{name: "stopped", script: daemonUp + "sleep 30", timeout: time.Minute, cancel: true, err: "context canceled"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					tag := "37." + strconv.Itoa(os.Getpid()%10000*100+m*10+i)
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					if tc.cancel {
						go func() {
							// Stopped once its daemon runs, detached.
							for ctx.Err() == nil && len(withArg(tag)) == 0 {
								time.Sleep(time.Millisecond)
							}
							cancel()
						}()
					}
					hc := HealthCheck{Command: "setsid sleep " + tag + " & " + tc.script, Timeout: tc.timeout}
					began := time.Now()
					ok, out, err := runHealthCheck(ctx, hc, box, hclog.NewNullLogger())
					t.Logf("%v after %v: %v %q", ok, time.Since(began).Round(time.Millisecond), err, out)
					if ok != tc.ok || (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
						t.Errorf("got %v, %v; want %v, %q", ok, err, tc.ok, tc.err)
					}
					if !strings.Contains(out, tc.out) {
						t.Errorf("output %q, want %q in it", out, tc.out)
					}
					if left := withArg(tag); len(left) > 0 {
						t.Errorf("the check's daemon outlived it: %v", left)
						for _, pid := range left {
							_ = syscall.Kill(pid, syscall.SIGKILL)
						}
					}
				})
			}
		})
	}
}
