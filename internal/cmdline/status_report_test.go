package cmdline

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
)

func TestReport(t *testing.T) {
	at := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	now := at.Add(90 * time.Second)
	holder := locker.Holder{ID: "a:1", Hostname: "a", PID: 1, Epoch: 42, AcquiredAt: at, Version: "v1", LeaseRemaining: 14 * time.Second}
	cases := []struct {
		name     string
		backend  string
		h        locker.Holder
		err      error
		text     []string
		json     string
		line     string // neverUsedLine, for a key never used
		failWith string
	}{
		{
			name: "etcd", backend: "etcd", h: holder,
			text: []string{"leader    a:1", "epoch     42", "acquired  2026-11-29T09:00:00Z (1m30s ago)", "lease     14s left (etcd lease TTL)"},
			json: `{"key":"k","backend":"etcd","leader":{"id":"a:1","hostname":"a","pid":1,"epoch":42,"acquired_at":"2026-11-29T09:00:00Z","version":"v1","lease_remaining_seconds":14},"candidates":null}`,
		},
		{
			name: "consul", backend: "consul", h: holder,
			text: []string{"lease     at most 14s (Consul session TTL)"},
		},
		{
			name: "local", backend: "local", h: holder,
			text: []string{"lease     held while pid 1 lives (local flock, no expiry)"},
			json: `{"key":"k","backend":"local","leader":{"id":"a:1","hostname":"a","pid":1,"epoch":42,"acquired_at":"2026-11-29T09:00:00Z","version":"v1","lease_remaining_seconds":null},"candidates":null}`,
		},
		{
			name: "foreign value", backend: "consul", h: locker.Holder{ID: "written by hand", Epoch: 5},
			text: []string{"leader    written by hand", "hostname  unknown", "acquired  unknown", "lease     unknown"},
			json: `{"key":"k","backend":"consul","leader":{"id":"written by hand","hostname":"","pid":0,"epoch":5,"acquired_at":null,"lease_remaining_seconds":null},"candidates":null}`,
		},
		{
			name: "no leader", backend: "etcd", err: fmt.Errorf("etcd: key: %w", locker.ErrNoLeader),
			text: []string{"leader   no leader"},
			json: `{"key":"k","backend":"etcd","leader":null,"candidates":null}`,
		},
		{
			name: "never used", backend: "local",
			err:  &locker.NeverUsedError{Key: "k", Where: "/run/leaderrun (local lock dir)", Fields: []string{"Dir"}},
			text: []string{"leader     no leader, key never used", "looked at  /run/leaderrun (local lock dir)"},
			json: `{"key":"k","backend":"local","leader":null,"never_used":true,"looked_at":"/run/leaderrun (local lock dir)","candidates":null}`,
			line: `key "k" was never used at /run/leaderrun (local lock dir) — check the key and --lock-dir`,
		},
		{
			name: "never used, wrapped", backend: "etcd",
			err:  fmt.Errorf("read: %w", &locker.NeverUsedError{Key: "k", Where: "/leaderrun/k/ on etcd a:2379", Fields: []string{"Endpoints", "Prefix"}}),
			json: `{"key":"k","backend":"etcd","leader":null,"never_used":true,"looked_at":"/leaderrun/k/ on etcd a:2379","candidates":null}`,
			line: `key "k" was never used at /leaderrun/k/ on etcd a:2379 — check the key, --etcd-endpoints and --prefix`,
		},
		{
			name: "backend error", backend: "etcd", err: errors.New("context deadline exceeded"),
			failWith: "deadline",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := newStatusReport("k", c.backend, c.h, c.err)
			if c.failWith != "" {
				if err == nil || !strings.Contains(err.Error(), c.failWith) {
					t.Errorf("error %v, want %q", err, c.failWith)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			if err := r.writeText(&out, now); err != nil {
				t.Fatal(err)
			}
			for _, want := range c.text {
				if !strings.Contains(out.String(), want+"\n") {
					t.Errorf("table lacks %q:\n%s", want, out.String())
				}
			}
			if got := r.NeverUsed; got != (c.line != "") {
				t.Errorf("NeverUsed %v, want %v", got, c.line != "")
			} else if got && r.neverUsedLine() != c.line {
				t.Errorf("line\n got %s\nwant %s", r.neverUsedLine(), c.line)
			}
			if c.json != "" {
				b, _ := json.Marshal(r)
				if string(b) != c.json {
					t.Errorf("json\n got %s\nwant %s", b, c.json)
				}
			}
		})
	}
}

func TestCheckEpoch(t *testing.T) {
	b := locker.Holder{ID: "b:7", Hostname: "b", PID: 7, Epoch: 43}
	cases := []struct {
		name    string
		epoch   uint64
		h       locker.Holder
		err     error
		notHeld bool
		msg     string
	}{
		{"still leads", 43, b, nil, false, ""},
		{"taken over", 42, b, nil, true, `epoch 42 does not hold key "k": held by b:7 (host b, pid 7) with epoch 43`},
		{"nobody leads", 42, locker.Holder{}, fmt.Errorf("x: %w", locker.ErrNoLeader), true, "no leader"},
		{"never used", 42, locker.Holder{}, &locker.NeverUsedError{Key: "k", Where: "/srv/locks (local lock dir)"}, true, `no leader, the key was never used at /srv/locks (local lock dir)`},
		{"backend down", 42, locker.Holder{}, errors.New("connection refused"), false, "connection refused"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := checkEpoch("k", c.epoch, c.h, c.err)
			if errors.Is(err, errNotLeader) != c.notHeld || (c.msg == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.msg)) {
				t.Errorf("%v, want not-held=%v with %q", err, c.notHeld, c.msg)
			}
		})
	}
}
