//go:build linux

// Package ops is leaderrun's operator surface: an Observer that follows the
// supervisor through its Events and serves /healthz, /status and /metrics
// and speaks to systemd (READY, STATUS, STOPPING, WATCHDOG), plus the
// holder reports of `leaderrun status` and `leaderrun check` (DESIGN §5).
//
// The Observer only watches. It never decides anything about leadership:
// the deadline it reports is the supervisor's own, taken from the events.
package ops

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/supervise"
)

// Config configures an Observer.
type Config struct {
	// Key and ID name this leaderrun in /status and STATUS=, and label
	// the leaderrun_info series. Key is the key, never one of its slot
	// keys: SetSlot names the slot's key in /status and STATUS=.
	Key, ID string
	// Slot labels leaderrun_info with the slot a --holders N > 1 run
	// holds ("" without one). Slotted gives
	// leaderrun_info its slot label from the start, empty until SetSlot
	// names the slot won.
	Slot    string
	Slotted bool
	// Holders is --holders N (0 or 1: one), exported as leaderrun_holders
	// so that alert rules know how many leaders a key may have.
	Holders int
	// TTL is the lease TTL, exported as leaderrun_ttl_seconds so that alert
	// rules can tell how long a key may go without a leader. Zero exports 0.
	TTL time.Duration
	// HTTPAddr is where /healthz, /status and /metrics are served
	// (host:port; port 0 picks one, logged at start). Empty serves nothing.
	HTTPAddr string
	// RenewInterval is the supervisor's renewal interval. An event loop
	// silent for max(1s, RenewInterval) while leading counts as stuck: by
	// then it has missed a renewal.
	RenewInterval time.Duration
	// Clock is the time source, the supervisor's (nil: the real clock).
	Clock supervise.Clock
	// Rejoin is true with --on-lost rejoin: a lost leadership then does not
	// end the process, so it is no reason to tell systemd STOPPING=1.
	Rejoin bool
	// Backend is read once (Leader) so that READY=1 means "the backend
	// answered" even on a standby, whose campaign may wait for hours. With
	// nil or a backend with no server to answer (locker.HostLocal, behind
	// any wrapper), the first campaign counts as ready instead.
	Backend locker.Locker
	// Logger receives the observer's own lines; nil discards.
	Logger hclog.Logger
}

// Observer follows one supervisor. Create it with Start, pass Events() to
// supervise.Config.Events (compose with Chain), and Close it at exit.
type Observer struct {
	cfg        Config
	log        hclog.Logger
	stallAfter time.Duration
	now        func() time.Time // injectable for tests

	mu  sync.Mutex
	st  state
	key string // what /status and STATUS= name (statusKey)

	// lastTick is when the event loop last turned, as nanoseconds since
	// base on the monotonic clock; atomic because it moves at every turn
	// (at least every supervise.HeartbeatInterval while leading).
	base     time.Time
	lastTick atomic.Int64

	metrics *metrics
	notify  notifier
	kick    chan struct{} // wakes the systemd notifier; buffer 1

	srv    *http.Server
	ln     net.Listener
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed sync.Once
}

// Start binds cfg.HTTPAddr (a bind failure is returned and nothing keeps
// running) and starts the goroutines that serve it and speak to systemd.
func Start(cfg Config) (*Observer, error) {
	return start(cfg, systemdNotifier())
}

func start(cfg Config, n notifier) (*Observer, error) {
	if cfg.Clock == nil {
		cfg.Clock = supervise.RealClock{}
	}
	o := &Observer{
		cfg:        cfg,
		log:        cfg.Logger,
		stallAfter: max(time.Second, cfg.RenewInterval),
		now:        cfg.Clock.Now,
		st:         state{role: RoleCampaigning},
		key:        cfg.Key,
		base:       cfg.Clock.Now(),
		notify:     n,
		kick:       make(chan struct{}, 1),
	}
	if o.log == nil {
		o.log = hclog.NewNullLogger()
	}
	o.metrics = newMetrics(cfg.Key, cfg.ID, cfg.Slot, cfg.Slotted || cfg.Slot != "", max(cfg.Holders, 1), cfg.TTL, o.gauge(func(st *state, _ time.Time) float64 {
		if st.role == RoleLeader {
			return 1
		}
		return 0
	}), o.gauge(func(st *state, _ time.Time) float64 {
		return float64(st.epoch)
	}), o.gauge(func(st *state, now time.Time) float64 {
		return st.leaseRemaining(now).Seconds()
	}))
	o.metrics.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "leaderrun_paused",
			Help: "1 while this candidate holds back because the key is paused (leaderrun pause), else 0.",
		}, o.gauge(func(st *state, _ time.Time) float64 { return boolGauge(st.paused != nil && st.heldBack != "") })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "leaderrun_held_back",
			Help: "1 while this candidate does not campaign: the key is paused or handed over to another candidate, or the health check fails; else 0.",
		}, o.gauge(func(st *state, _ time.Time) float64 { return boolGauge(st.heldBack != "") })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "leaderrun_job_ready",
			Help: "1 while the running job has sent READY=1 to its NOTIFY_SOCKET, else 0.",
		}, o.gauge(func(st *state, _ time.Time) float64 { return boolGauge(st.childPID != 0 && !st.jobReadyAt.IsZero()) })),
	)

	if cfg.HTTPAddr != "" {
		ln, err := net.Listen("tcp", cfg.HTTPAddr)
		if err != nil {
			return nil, &locker.ConfigError{Field: "HTTPAddr", Rule: cfg.HTTPAddr + ": cannot listen", Err: err}
		}
		o.ln = ln
		o.srv = &http.Server{
			Handler:           o.Handler(),
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       10 * time.Second,
			WriteTimeout:      10 * time.Second,
			IdleTimeout:       60 * time.Second,
			ErrorLog:          o.log.Named("http").StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
		}
		o.log.Info("serving /healthz, /status and /metrics", "addr", ln.Addr().String())
	}

	ctx, cancel := context.WithCancel(context.Background())
	o.cancel = cancel
	if o.srv != nil {
		o.wg.Add(1)
		go func() {
			defer o.wg.Done()
			if err := o.srv.Serve(o.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				o.log.Error("operator endpoints stopped", "error", err)
			}
		}()
	}
	if o.notify.enabled() {
		o.wg.Add(1)
		go func() {
			defer o.wg.Done()
			o.notifyLoop(ctx)
		}()
		if !o.readyAtCampaign() {
			o.wg.Add(1)
			go func() {
				defer o.wg.Done()
				o.probe(ctx)
			}()
		}
	}
	return o, nil
}

// Addr is the address the endpoints listen on, or nil without HTTPAddr.
func (o *Observer) Addr() net.Addr {
	if o.ln == nil {
		return nil
	}
	return o.ln.Addr()
}

// Close stops serving (letting requests in flight finish for up to 2s),
// tells systemd STOPPING=1 if it was not told yet, and waits for every
// goroutine Start began.
func (o *Observer) Close() {
	o.closed.Do(func() {
		if o.srv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if err := o.srv.Shutdown(ctx); err != nil {
				_ = o.srv.Close()
			}
			cancel()
		}
		o.cancel()
		o.wg.Wait()
	})
}

// Events are the callbacks that keep the observer's state; they only take
// a mutex and never block on I/O.
func (o *Observer) Events() supervise.Events {
	return supervise.Events{
		Campaigning: func() {
			o.update(func(st *state) {
				st.role = RoleCampaigning
				if o.readyAtCampaign() {
					st.ready = true
				}
			})
		},
		Acquired: func(epoch uint64, deadline time.Time) {
			o.tick() // the loop starts now; do not judge it by an old tick
			o.update(func(st *state) {
				*st = state{role: RoleLeader, holding: true, epoch: epoch, deadline: deadline, ready: true}
			})
			o.metrics.acquired.Inc()
		},
		Renewed: func(deadline time.Time) {
			o.update(func(st *state) { st.deadline = deadline })
			o.metrics.renewals.WithLabelValues("ok").Inc()
		},
		RenewFailed: func(error) {
			o.metrics.renewals.WithLabelValues("error").Inc()
		},
		ChildStarted: func(pid int) {
			o.update(func(st *state) { st.childPID, st.jobReadyAt, st.jobStatus = pid, time.Time{}, "" })
			o.metrics.starts.Inc()
		},
		ChildExited: func(code int) {
			o.update(func(st *state) { st.childPID, st.jobReadyAt, st.jobStatus = 0, time.Time{}, "" })
			o.metrics.childExited(code)
		},
		JobReady: func(at time.Time) {
			o.update(func(st *state) { st.jobReadyAt = at })
		},
		JobStatus: func(text string) {
			o.update(func(st *state) { st.jobStatus = text })
		},
		Stopping: func(reason string, lost bool) {
			o.update(func(st *state) { st.role, st.reason, st.lost = RoleStopping, reason, lost })
			if lost {
				o.metrics.lost.Inc()
			}
		},
		HandingOver: func() {
			o.update(func(st *state) { st.handover = true })
		},
		Released: func() {
			o.update(func(st *state) {
				st.holding, st.epoch, st.deadline, st.childPID = false, 0, time.Time{}, 0
			})
		},
		HeldBack: func(why string, pause *locker.Pause) {
			o.update(func(st *state) { st.heldBack, st.paused = why, pause })
		},
		Tick: o.tickIfObserved(),
	}
}

// tickIfObserved is the Tick event, or nil when nothing reads the heartbeat
// (no --http-addr, no systemd watchdog): the leader then sleeps until
// something happens instead of turning its loop four times a second.
func (o *Observer) tickIfObserved() func() {
	if o.srv == nil && o.notify.watchdog == 0 {
		return nil
	}
	return o.tick
}

// readyAtCampaign: without a backend to probe, the first campaign is
// "ready" (see Config.Backend).
func (o *Observer) readyAtCampaign() bool {
	if o.cfg.Backend == nil {
		return true
	}
	_, isLocal := locker.As[locker.HostLocal](o.cfg.Backend)
	return isLocal
}

// update changes the state under the mutex and wakes the notifier.
func (o *Observer) update(f func(*state)) {
	o.mu.Lock()
	f(&o.st)
	o.mu.Unlock()
	select {
	case o.kick <- struct{}{}:
	default: // a wake-up is already pending; it will read the latest state
	}
}

func (o *Observer) tick() {
	o.lastTick.Store(int64(o.now().Sub(o.base)))
}

// snapshot copies the state and judges its health at one instant.
func (o *Observer) snapshot() (state, Health, time.Time) {
	now := o.now()
	last := o.base.Add(time.Duration(o.lastTick.Load()))
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.st, o.st.health(now, last, o.stallAfter), now
}

// SetSlot names the slot a --holders run won, in leaderrun_info: a run
// with --holders serves /healthz, /metrics and READY=1 while it campaigns
// for a slot, before it knows which one it holds.
func (o *Observer) SetSlot(slotKey, slot string) {
	if slot == "" {
		return
	}
	o.metrics.setSlot(slot)
	o.mu.Lock()
	o.key = slotKey
	o.mu.Unlock()
}

// statusKey is the key /status and STATUS= name: the slot's key once a
// --holders run holds one.
func (o *Observer) statusKey() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.key
}

// Health is the verdict /healthz serves and the watchdog obeys.
func (o *Observer) Health() Health {
	_, h, _ := o.snapshot()
	return h
}

// gauge adapts a read of the state to a Prometheus GaugeFunc.
func (o *Observer) gauge(read func(*state, time.Time) float64) func() float64 {
	return func() float64 {
		st, _, now := o.snapshot()
		return read(&st, now)
	}
}

// probe reads the leader once, retrying with backoff, until the backend
// answers; then leaderrun is ready for systemd.
func (o *Observer) probe(ctx context.Context) {
	wait := 500 * time.Millisecond
	for {
		o.mu.Lock()
		ready := o.st.ready
		o.mu.Unlock()
		if ready {
			return
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := o.cfg.Backend.Leader(pctx)
		cancel()
		if err == nil || errors.Is(err, locker.ErrNoLeader) {
			o.update(func(st *state) { st.ready = true })
			return
		}
		if ctx.Err() != nil {
			return
		}
		o.log.Debug("backend not answering yet; READY=1 waits", "error", err, "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, 5*time.Second)
	}
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
