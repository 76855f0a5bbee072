//go:build linux

package supervise

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaderrun/leaderrun/contain"
	"github.com/leaderrun/leaderrun/supervise/jobnotify"
)

// NotifyConfig is what leaderrun asks of its job over the notify protocol
// (DESIGN §5, "The job's notifications"). The socket is always served: a
// job that speaks the protocol has its READY=1 and STATUS= recorded; these
// make leaderrun act on them.
type NotifyConfig struct {
	// ReadyTimeout: a job that sent no READY=1 within it of its start is
	// stopped, and the term is handed over.
	ReadyTimeout time.Duration
	// Watchdog: a job that sent no WATCHDOG=1 for this long (once ready,
	// when ReadyTimeout is set) is a zombie: stopped, and the term handed
	// over.
	Watchdog time.Duration
	// Dir is where the socket's private directory is made; "" for the
	// default (runtimeDir).
	Dir string
}

func (n NotifyConfig) rules() jobnotify.Rules {
	return jobnotify.Rules{ReadyTimeout: n.ReadyTimeout, Watchdog: n.Watchdog}
}

// Zombie terms on one host back off before it campaigns again: the first
// waits zombieBackoffMin (or the watchdog period, if longer), each next one
// twice the last, up to zombieBackoffMax; a term that ends otherwise
// forgets them.
const (
	zombieBackoffMin = 5 * time.Second
	zombieBackoffMax = 5 * time.Minute
)

// notifySocket is the supervisor's socket and what its receiver hands the
// leader's loop: the messages of the job that runs now, from the job's
// processes only.
type notifySocket struct {
	sock    *jobnotify.Socket
	job     atomic.Pointer[contain.Job]
	msgs    chan jobnotify.Message
	refused atomic.Int64
	done    chan struct{}
}

// runtimeDir is where a socket's directory goes by default: the unit's
// RuntimeDirectory, the user's runtime directory, /run for root, else the
// temporary directory.
func runtimeDir() string {
	for _, d := range []string{os.Getenv("RUNTIME_DIRECTORY"), os.Getenv("XDG_RUNTIME_DIR")} {
		if d != "" && len(d) < 60 {
			if st, err := os.Stat(d); err == nil && st.IsDir() {
				return d
			}
		}
	}
	if os.Geteuid() == 0 {
		if st, err := os.Stat("/run"); err == nil && st.IsDir() {
			return "/run"
		}
	}
	return ""
}

// openNotify makes the socket and starts its receiver. When it cannot be
// made, the job runs without it (said once at WARN), unless
// --ready-timeout or --job-watchdog is set: a job that can never be heard
// would be judged a zombie term after term, so that is leaderrun's own
// failure, returned before anything is campaigned for (exit 125).
func (s *Supervisor) openNotify() (*notifySocket, error) {
	dir := s.cfg.Notify.Dir
	if dir == "" {
		dir = runtimeDir()
	}
	sock, err := jobnotify.Listen(dir)
	if err != nil {
		if r := s.cfg.Notify.rules(); r.ReadyTimeout > 0 || r.Watchdog > 0 {
			return nil, fmt.Errorf("--ready-timeout and --job-watchdog need the job's notify socket, which cannot be made: %w", err)
		}
		s.log.Warn("the job gets no notify socket", "error", err)
		return nil, nil
	}
	n := &notifySocket{sock: sock, msgs: make(chan jobnotify.Message, 64), done: make(chan struct{})}
	go n.receive(s)
	return n, nil
}

// receive hands on the messages of the running job's processes; others
// are dropped and counted, the first said in the log.
func (n *notifySocket) receive(s *Supervisor) {
	defer close(n.done)
	for {
		m, ok, err := n.sock.Receive(func(pid, uid int) bool {
			j := n.job.Load()
			return j != nil && j.Contains(pid)
		})
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if errors.Is(err, jobnotify.ErrNoCredentials) {
				continue
			}
			s.log.Debug("a notification dropped", "error", err)
			continue
		}
		if !ok {
			if n.refused.Add(1) == 1 {
				s.log.Warn("a notification from a process outside the job was ignored", "pid", m.Pid, "uid", m.Uid)
			}
			continue
		}
		select {
		case n.msgs <- m:
		default:
			// The loop is behind by 64 messages: a ping or a status
			// lost changes little, and nothing may block the receiver.
		}
	}
}

// close stops the receiver and removes the socket.
func (n *notifySocket) close() {
	if n == nil {
		return
	}
	_ = n.sock.Close()
	<-n.done
}

// env is what the job's environment says of the socket.
func (n *notifySocket) env(c NotifyConfig) []string {
	if n == nil {
		return nil
	}
	return append([]string{"NOTIFY_SOCKET=" + n.sock.Path()}, jobnotify.WatchdogEnv(c.rules())...)
}

// messages is the channel of the job's messages; nil without a socket.
func (n *notifySocket) messages() <-chan jobnotify.Message {
	if n == nil {
		return nil
	}
	return n.msgs
}

// watch makes j the job whose processes are heard (nil: none), dropping
// what an earlier job said and the loop has not read.
func (n *notifySocket) watch(j *contain.Job) {
	if n == nil {
		return
	}
	n.job.Store(j)
	for {
		select {
		case <-n.msgs:
		default:
			return
		}
	}
}

// jobSaid applies a message of the running job's to the term's judgement,
// and reports what changed.
func (s *Supervisor) jobSaid(l *leadership, m jobnotify.Message) {
	if l.said == nil || l.child == nil {
		return
	}
	wasReady, _ := l.said.Ready()
	oldStatus, _ := l.said.Status()
	wasStopping := l.said.Stopping()
	now := s.clock.Now()
	l.said.Apply(m, now)
	if ready, at := l.said.Ready(); ready && !wasReady {
		s.log.Info("the job is ready", "after", at.Sub(l.startedAt))
		if f := s.cfg.Events.JobReady; f != nil {
			f(at)
		}
	}
	if st, ok := l.said.Status(); ok && st != oldStatus {
		s.log.Debug("the job's status", "status", st)
		if f := s.cfg.Events.JobStatus; f != nil {
			f(st)
		}
	}
	if ready, at := l.said.Ready(); (ready && !wasReady) || m.Status != nil {
		st, _ := l.said.Status()
		if !ready {
			at = time.Time{}
		}
		l.history.said(at, st)
	}
	if l.said.Stopping() && !wasStopping {
		s.log.Info("the job says it is stopping")
	}
	s.armJobCheck(l)
}

// armJobCheck sets the timer of the next judgement of the job.
func (s *Supervisor) armJobCheck(l *leadership) {
	if l.jobCheckAt != nil {
		l.jobCheckAt.Stop()
		l.jobCheckAt = nil
	}
	if l.said == nil {
		return
	}
	if why := l.said.Check(s.clock.Now()); why != "" {
		s.jobFailed(l, why)
		return
	}
	if d := l.said.Deadline(); !d.IsZero() {
		l.jobCheckAt = s.clock.NewTimer(d.Sub(s.clock.Now()))
	}
}

// jobFailed ends the term of a job that broke its notify rules: it is
// stopped like on SIGTERM (stop signal, kill grace, SIGKILL) and the key
// handed over, and this host waits before it campaigns again.
func (s *Supervisor) jobFailed(l *leadership, why string) {
	if l.stopping {
		return
	}
	l.said = nil
	wait := s.zombies.note(s.cfg.Notify.Watchdog, time.Now())
	s.log.Warn("the job hangs; stopping it and handing the key over", "reason", why, "campaign_again_in", wait)
	l.handover = true
	s.zombieTerm = true
	call(s.cfg.Events.HandingOver)
	s.finish(l, why, false, l.lastCode)
}

// ZombieHold counts the terms in a row whose job hung on this host, and
// says until when it waits before campaigning again. One is shared by the
// terms of a run (Config.Zombies), so that with --holders, where each term
// has a supervisor of its own, the count carries over.
type ZombieHold struct {
	mu    sync.Mutex
	n     int
	until time.Time
}

// note counts a term whose job hung at now and returns the wait: 5s or the
// watchdog period (the longer) after the first, twice the last after each
// next one, at most 5 minutes.
func (z *ZombieHold) note(period time.Duration, now time.Time) time.Duration {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.n++
	wait := max(zombieBackoffMin, period)
	for i := 1; i < z.n && wait < zombieBackoffMax; i++ {
		wait *= 2
	}
	wait = min(wait, zombieBackoffMax)
	z.until = now.Add(wait)
	return wait
}

// reset forgets the count: a term ended otherwise.
func (z *ZombieHold) reset() {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.n, z.until = 0, time.Time{}
}

// Hold is why this host does not campaign at now, and until when; "" once
// it may.
func (z *ZombieHold) Hold(now time.Time) (string, time.Time) {
	if z == nil {
		return "", time.Time{}
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.n == 0 || !now.Before(z.until) {
		return "", time.Time{}
	}
	terms := "term"
	if z.n > 1 {
		terms = "terms in a row"
	}
	return fmt.Sprintf("the job hung here (%d %s); campaigning again at %s", z.n, terms, z.until.Format(time.RFC3339)), z.until
}
