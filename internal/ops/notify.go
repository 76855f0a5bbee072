//go:build linux

package ops

import (
	"context"
	"strings"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// notifier speaks the sd_notify protocol. send is nil when NOTIFY_SOCKET
// is not set; watchdog is half of WATCHDOG_USEC, or 0 when systemd does
// not watch this process.
type notifier struct {
	send     func(msg string) error
	watchdog time.Duration
}

// systemdNotifier reads NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID. The
// variables stay in leaderrun's environment (it keeps notifying); the
// child's environment drops them (main.childEnv).
func systemdNotifier() notifier {
	var n notifier
	if ok, _ := daemon.SdNotify(false, ""); !ok {
		// Unset, or nothing listens there: nobody to notify.
		return n
	}
	n.send = func(msg string) error {
		_, err := daemon.SdNotify(false, msg)
		return err
	}
	// A WATCHDOG_PID naming another process yields 0: not ours to ping.
	if d, err := daemon.SdWatchdogEnabled(false); err == nil && d > 0 {
		n.watchdog = d / 2
	}
	return n
}

func (n notifier) enabled() bool { return n.send != nil }

// notifyLoop tells systemd what changed each time the state is kicked, and
// pings the watchdog at half its timeout while, and only while, the
// control loop is healthy (the same verdict as /healthz, DESIGN §5).
//
//   - READY=1 once the backend answered (see Config.Backend) or leadership
//     was won: a standby that waits its turn is a started service.
//   - STATUS= on every change of role, epoch or child.
//   - STOPPING=1 when the stop sequence begins a shutdown of leaderrun
//     itself (not a loss with --on-lost rejoin, nor a handover), or at
//     Close.
func (o *Observer) notifyLoop(ctx context.Context) {
	var ping <-chan time.Time
	if o.notify.watchdog > 0 {
		t := o.cfg.Clock.NewTicker(o.notify.watchdog)
		defer t.Stop()
		ping = t.C()
	}
	var sentReady, sentStopping, withheld bool
	var lastStatus string
	send := func(lines []string) {
		if len(lines) == 0 {
			return
		}
		if err := o.notify.send(strings.Join(lines, "\n")); err != nil {
			o.log.Warn("systemd notification failed", "error", err)
		}
	}
	flush := func(closing bool) {
		o.mu.Lock()
		st := o.st
		o.mu.Unlock()
		var lines []string
		if st.ready && !sentReady {
			lines, sentReady = append(lines, "READY=1"), true
		}
		if s := st.statusLine(o.statusKey()); s != lastStatus {
			lines, lastStatus = append(lines, "STATUS="+s), s
		}
		// A handover (step-down, pause) ends the term, not leaderrun:
		// STOPPING=1 then would have systemd kill the waiting candidate
		// once TimeoutStopSec passed.
		shuttingDown := st.role == RoleStopping && !st.handover && !(st.lost && o.cfg.Rejoin)
		if (shuttingDown || closing) && !sentStopping {
			lines, sentStopping = append(lines, "STOPPING=1"), true
		}
		send(lines)
	}
	for {
		select {
		case <-ctx.Done():
			flush(true)
			return
		case <-o.kick:
			flush(false)
		case <-ping:
			h := o.Health()
			if h.OK {
				send([]string{"WATCHDOG=1"})
				if withheld {
					o.log.Info("control loop healthy again; watchdog pings resume")
				}
			} else if !withheld {
				o.log.Warn("control loop unhealthy; withholding watchdog pings", "problems", h.String())
			}
			withheld = !h.OK
		}
	}
}
