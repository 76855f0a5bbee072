package locker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// fakeLocker answers Acquire with err and Leader with holder.
type fakeLocker struct {
	err    error
	holder Holder
}

func (f fakeLocker) Acquire(context.Context) (Lease, error)      { return nil, f.err }
func (f fakeLocker) Leader(context.Context) (Holder, error)      { return f.holder, nil }
func (f fakeLocker) ReleaseHandle(context.Context, string) error { return nil }
func (f fakeLocker) Close() error                                { return nil }

func TestOneAttempt(t *testing.T) {
	since := time.Date(2026, 11, 30, 3, 0, 2, 0, time.UTC)
	holder := Holder{ID: "web1:42", Hostname: "web1", PID: 42, Epoch: 7, AcquiredAt: since}
	cases := []struct {
		name    string
		err     error
		is      error
		mention []string
	}{
		{"held names the holder once", ErrHeld, ErrHeld, []string{`"billing"`, "web1:42", "host web1", "pid 42", "since 2026-11-30T03:00:02Z", "epoch 7"}},
		{"unreachable is refused, not retried", errors.New("dial tcp 127.0.0.1:1: connection refused"), ErrRefused, []string{"127.0.0.1:1"}},
		{"refused stays refused", ErrRefused, ErrRefused, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := OneAttempt(fakeLocker{err: c.err, holder: holder}, "billing", "127.0.0.1:1", time.Second).Acquire(context.Background())
			if !errors.Is(err, c.is) {
				t.Fatalf("Acquire = %v, want it to wrap %v", err, c.is)
			}
			for _, m := range c.mention {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("%q does not mention %q", err, m)
				}
			}
			if strings.Count(err.Error(), "held") > 1 {
				t.Errorf("%q says held more than once", err)
			}
		})
	}
}

func TestRunLogOfLooksThroughOneAttempt(t *testing.T) {
	if _, ok := RunLogOf(OneAttempt(fakeLocker{}, "k", "a", 0)); ok {
		t.Fatal("a locker without records has a RunLog")
	}
	rl := runLogLocker{}
	if got, ok := RunLogOf(OneAttempt(rl, "k", "a", 0)); !ok || got == nil {
		t.Fatal("RunLogOf did not find the RunLog behind OneAttempt")
	}
}

func TestAsFindsTheOutermostLayerWithTheCapability(t *testing.T) {
	inner := hostLocalLocker{dir: "/inner"}
	lk := OneAttempt(OneAttempt(inner, "k", "a", 0), "k", "b", 0)
	if h, ok := As[HostLocal](lk); !ok || h.LockDir() != "/inner" {
		t.Fatalf("As[HostLocal] through two wrappers = %v, %v", h, ok)
	}
	if got, ok := As[hostLocalLocker](lk); !ok || got != inner {
		t.Fatalf("As of the concrete type = %v, %v", got, ok)
	}
	outer := hostLocalLocker{Locker: OneAttempt(inner, "k", "a", 0), dir: "/outer"}
	if h, _ := As[HostLocal](outer); h.LockDir() != "/outer" {
		t.Fatalf("As found %q, want the outermost layer", h.LockDir())
	}
	if _, ok := As[HostLocal](OneAttempt(fakeLocker{}, "k", "a", 0)); ok {
		t.Fatal("As found a capability no layer has")
	}
	if _, ok := As[HostLocal](nil); ok {
		t.Fatal("As found a capability in a nil Locker")
	}
}

// hostLocalLocker is a HostLocal backend, or, with Locker set, a HostLocal
// wrapper of it.
type hostLocalLocker struct {
	fakeLocker
	Locker Locker
	dir    string
}

func (h hostLocalLocker) LockDir() string { return h.dir }
func (h hostLocalLocker) Unwrap() Locker  { return h.Locker }

type runLogLocker struct{ fakeLocker }

func (runLogLocker) RecordRun(context.Context, Lease, Run) error    { return nil }
func (runLogLocker) LookupRun(context.Context, string) (Run, error) { return Run{}, ErrNoRun }
func (runLogLocker) LatestRun(context.Context) (Run, error)         { return Run{}, ErrNoRun }
