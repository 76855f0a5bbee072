//go:build linux

package ops

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are leaderrun's Prometheus series, on a registry of their own
// (plus the Go runtime and process collectors), never the global one.
type metrics struct {
	reg *prometheus.Registry

	renewals   *prometheus.CounterVec
	acquired   prometheus.Counter
	lost       prometheus.Counter
	starts     prometheus.Counter
	childExits *prometheus.CounterVec

	// info is leaderrun_info, replaced when the slot becomes known.
	mu      sync.Mutex
	info    prometheus.Gauge
	key, id string
	slotted bool // leaderrun_info has a slot label
}

// newMetrics registers every series. The gauges read the observer's state
// at scrape time through the given functions.
//
// The leaderrun_* series carry no key label of their own: leaderrun_info
// (always 1) names the key and the id of this process (and its slot under
// --holders), and alert rules join
// it on the target's labels (examples/prometheus/leaderrun-rules.yml).
func newMetrics(key, id, slot string, slotted bool, holders int, ttl time.Duration, isLeader, epoch, leaseRemaining func() float64) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leaderrun_renewals_total",
			Help: "Lease renewal attempts while leader, by result (ok or error).",
		}, []string{"result"}),
		acquired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leaderrun_leadership_acquired_total",
			Help: "Times leadership was won.",
		}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leaderrun_leadership_lost_total",
			Help: "Times leadership was lost (backend report or local deadline) and the child stopped for it.",
		}),
		starts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leaderrun_child_starts_total",
			Help: "Times the child was started.",
		}),
		childExits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leaderrun_child_exits_total",
			Help: "Child exits by exit code (128+N when ended by signal N).",
		}, []string{"code"}),
	}
	// Both results exist from the start, so rate() works before the first
	// failure.
	m.renewals.WithLabelValues("ok")
	m.renewals.WithLabelValues("error")
	m.key, m.id, m.slotted = key, id, slotted
	info := m.newInfo(slot)
	ttlGauge := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "leaderrun_ttl_seconds",
		Help: "The lease TTL (--ttl): how long the key may stay leaderless after a holder vanishes.",
	})
	ttlGauge.Set(ttl.Seconds())
	holdersGauge := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "leaderrun_holders",
		Help: "How many holders the key may have at once (--holders N, 1 without): each slot has one leader.",
	})
	holdersGauge.Set(float64(holders))
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		info, ttlGauge, holdersGauge,
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "leaderrun_is_leader",
			Help: "1 from winning leadership until the stop sequence begins, else 0.",
		}, isLeader),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "leaderrun_epoch",
			Help: "Fencing epoch of the leadership held (until released), else 0.",
		}, epoch),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "leaderrun_lease_remaining_seconds",
			Help: "Time left until the local lease deadline while holding leadership (negative once past it), else 0.",
		}, leaseRemaining),
		m.renewals, m.acquired, m.lost, m.starts, m.childExits,
	)
	return m
}

// newInfo is leaderrun_info for slot ("" before a slot is won, or
// without --holders).
func (m *metrics) newInfo(slot string) prometheus.Gauge {
	labels := prometheus.Labels{"key": m.key, "id": m.id}
	if m.slotted {
		labels["slot"] = slot // --holders N > 1: the slot this process holds, once it holds one
	}
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "leaderrun_info",
		Help:        "Always 1; its labels name the key this leaderrun campaigns for, its holder id and, with --holders, its slot once it holds one.",
		ConstLabels: labels,
	})
	info.Set(1)
	m.info = info
	return info
}

// setSlot labels leaderrun_info with the slot won.
func (m *metrics) setSlot(slot string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reg.Unregister(m.info)
	m.reg.MustRegister(m.newInfo(slot))
}

func (m *metrics) childExited(code int) {
	m.childExits.WithLabelValues(strconv.Itoa(code)).Inc()
}
