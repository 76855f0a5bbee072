// Package jobnotify is leaderrun's side of the notify protocol towards its
// job: a datagram socket of its own, named to the job by NOTIFY_SOCKET as
// systemd names its socket to a service, the messages parsed as systemd
// reads them (sd_notify(3)), and the rules that turn them into a verdict:
// ready or not, alive or a zombie.
//
// The socket belongs to leaderrun, never to systemd: under a unit, the job
// cannot make the unit ready or stop it by mistake. Only processes of the
// job count (the sender's credentials, checked against the job); others'
// datagrams are dropped and counted.
package jobnotify

import (
	"strconv"
	"strings"
	"time"
)

// MaxStatus is how much of a STATUS= text is kept, in bytes.
const MaxStatus = 200

// Message is one datagram, parsed. Fields a datagram did not set keep
// their zero value; Status is nil unless STATUS= was sent (an empty
// STATUS= clears the text).
type Message struct {
	// Pid and Uid are the sender's, from its credentials.
	Pid, Uid int

	Ready     bool // READY=1
	Reloading bool // RELOADING=1
	Stopping  bool // STOPPING=1
	Ping      bool // WATCHDOG=1
	Trigger   bool // WATCHDOG=trigger: fail now
	Status    *string
	// Extend is EXTEND_TIMEOUT_USEC: the deadline of the current phase
	// moves to at least this long from the message's arrival.
	Extend time.Duration
	// Watchdog is WATCHDOG_USEC: the job sets its own watchdog period.
	Watchdog time.Duration
}

// Empty reports whether m carries nothing the rules act on.
func (m Message) Empty() bool {
	return !m.Ready && !m.Reloading && !m.Stopping && !m.Ping && !m.Trigger &&
		m.Status == nil && m.Extend == 0 && m.Watchdog == 0
}

// Parse reads a datagram's assignments, one per line, as sd_notify(3)
// defines them. Unknown or malformed lines are ignored, as systemd ignores
// them; so are those leaderrun has no use for (MAINPID=, FDSTORE=, ERRNO=,
// BUSERROR=, BARRIER=1 whose descriptor the receiver closes).
func Parse(b []byte) Message {
	var m Message
	for _, line := range strings.Split(string(b), "\n") {
		name, value, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		switch name {
		case "READY":
			m.Ready = m.Ready || value == "1"
		case "RELOADING":
			m.Reloading = m.Reloading || value == "1"
		case "STOPPING":
			m.Stopping = m.Stopping || value == "1"
		case "WATCHDOG":
			switch value {
			case "1":
				m.Ping = true
			case "trigger":
				m.Trigger = true
			}
		case "STATUS":
			s := Printable(value, MaxStatus)
			m.Status = &s
		case "EXTEND_TIMEOUT_USEC":
			if d, ok := usec(value); ok {
				m.Extend = d
			}
		case "WATCHDOG_USEC":
			if d, ok := usec(value); ok {
				m.Watchdog = d
			}
		}
	}
	return m
}

// usec reads a positive count of microseconds.
func usec(s string) (time.Duration, bool) {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 || n > uint64(1<<62)/1000 {
		return 0, false
	}
	return time.Duration(n) * time.Microsecond, true
}

// Printable is s with every control character, and every byte of an
// invalid UTF-8 sequence, replaced by '?', cut to at most max bytes on a
// character boundary: a job's STATUS text reaches terminals and logs.
func Printable(s string, max int) string {
	var b strings.Builder
	for _, r := range strings.ToValidUTF8(s, "?") {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			r = '?'
		}
		if b.Len()+len(string(r)) > max {
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}
