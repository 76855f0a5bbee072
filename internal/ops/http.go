//go:build linux

package ops

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/leaderrun/leaderrun/locker"
)

// RunStatus is the JSON document served at /status. Its fields are stable:
// new ones may be added, none renamed or removed.
type RunStatus struct {
	// Role is campaigning, leader or stopping.
	Role Role `json:"role"`
	// Key and ID are this leaderrun's --key and --id.
	Key string `json:"key"`
	ID  string `json:"id"`
	// Epoch is the fencing epoch of the leadership held, until it is
	// released; 0 otherwise.
	Epoch uint64 `json:"epoch"`
	// LeaseRemainingSeconds is the time left until the supervisor's local
	// lease deadline while holding leadership (negative once past it); 0
	// otherwise.
	LeaseRemainingSeconds float64 `json:"lease_remaining_seconds"`
	// ChildPID is the running child's pid; 0 when none runs.
	ChildPID int `json:"child_pid"`
	// Healthy is what /healthz answers; Problems say why not.
	Healthy  bool     `json:"healthy"`
	Problems []string `json:"problems,omitempty"`
	// HeldBack says why this candidate does not campaign (the key is
	// paused, handed over to another candidate, the health check fails);
	// absent while it campaigns or leads.
	HeldBack string `json:"held_back,omitempty"`
	// Paused is the key's pause as this candidate last read it: by,
	// since, reason; absent when the key is not paused.
	Paused *locker.Pause `json:"paused,omitempty"`
	// JobReadyAt is when the running job sent READY=1 to its notify
	// socket; absent until it does. JobStatus is its last STATUS= text.
	JobReadyAt *time.Time `json:"job_ready_at,omitempty"`
	JobStatus  string     `json:"job_status,omitempty"`
}

// Status is the current RunStatus.
func (o *Observer) Status() RunStatus {
	st, h, now := o.snapshot()
	return RunStatus{
		Role:                  st.role,
		Key:                   o.statusKey(),
		ID:                    o.cfg.ID,
		Epoch:                 st.epoch,
		LeaseRemainingSeconds: st.leaseRemaining(now).Seconds(),
		ChildPID:              st.childPID,
		Healthy:               h.OK,
		Problems:              h.Problems,
		HeldBack:              st.heldBack,
		Paused:                st.paused,
		JobReadyAt:            readyAt(st),
		JobStatus:             st.jobStatus,
	}
}

func readyAt(st state) *time.Time {
	if st.childPID == 0 || st.jobReadyAt.IsZero() {
		return nil
	}
	t := st.jobReadyAt.UTC().Round(time.Millisecond)
	return &t
}

// Handler serves /healthz, /status and /metrics.
func (o *Observer) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		h := o.Health()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if !h.OK {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		line := h.String()
		if st := o.Status(); st.HeldBack != "" {
			// Held back is healthy: the process does what it was told.
			line += " (not campaigning: " + st.HeldBack + ")"
		}
		_, _ = w.Write([]byte(line + "\n"))
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(o.Status())
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(o.metrics.reg, promhttp.HandlerOpts{
		ErrorLog:      o.log.Named("metrics").StandardLogger(nil),
		ErrorHandling: promhttp.ContinueOnError,
	}))
	return mux
}
