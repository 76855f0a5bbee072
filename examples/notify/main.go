// Command notify is a job that speaks the notify protocol with go-systemd's
// daemon package, for
//
//	leaderrun --key billing --job-watchdog 10s -- ./notify
//
// It says READY=1 once started and pings WATCHDOG=1 from its work loop, not
// from a timer of its own: a loop that wedges stops the pings, and leaderrun
// hands the key to another host. SIGTERM is answered with STOPPING=1.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	// WATCHDOG_USEC, as leaderrun (or systemd) set it; 0 when not watched.
	period, err := daemon.SdWatchdogEnabled(false)
	if err != nil || period == 0 {
		period = 10 * time.Second
	}
	_, _ = daemon.SdNotify(false, daemon.SdNotifyReady+"\nSTATUS=started, epoch "+os.Getenv("LEADER_EPOCH"))

	tick := time.NewTicker(period / 2)
	defer tick.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			_, _ = daemon.SdNotify(false, daemon.SdNotifyStopping)
			return
		case <-tick.C:
		}
		work(n)
		_, _ = daemon.SdNotify(false, fmt.Sprintf("%s\nSTATUS=batch %d done", daemon.SdNotifyWatchdog, n))
	}
}

// work is one batch of the job's real work.
func work(n int) { _ = n }
