package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/leaderrun/leaderrun/locker"
)

// annRuns holds the once-per records of the key: a JSON object from slot
// to locker.Run, on the Lease itself.
const annRuns = annPrefix + "runs"

var _ locker.RunLog = (*Locker)(nil)

// RecordRun stores run in the Lease's runs annotation with an update
// conditioned on our leadership's last write, so a record is written only
// while we lead (ErrLost otherwise). Expired records are dropped by the same
// write. Records live as long as the Lease: deleting the Lease by hand
// forgets them.
func (l *Locker) RecordRun(ctx context.Context, ls locker.Lease, run locker.Run) error {
	s, ok := ls.(*lease)
	if !ok || s.l != l {
		return fmt.Errorf("kubernetes: %w: RecordRun needs a lease this Locker acquired", locker.ErrRefused)
	}
	var encodeErr error
	_, err := s.update(ctx, "record run", func(next *coordinationv1.Lease) {
		runs := runsOf(next)
		now := time.Now()
		for slot, r := range runs {
			if !r.Live(now) {
				delete(runs, slot)
			}
		}
		runs[run.Slot] = run
		b, err := json.Marshal(runs)
		if err != nil {
			encodeErr = err
			return
		}
		next.Annotations[annRuns] = string(b)
	})
	if encodeErr != nil {
		return fmt.Errorf("kubernetes: encode run records: %w", encodeErr)
	}
	return err
}

// LookupRun reads the record of slot from the Lease (a quorum read).
func (l *Locker) LookupRun(ctx context.Context, slot string) (locker.Run, error) {
	ls, err := l.get(ctx)
	if err != nil {
		return locker.Run{}, err
	}
	r, ok := runsOf(ls)[slot]
	if !ok || !r.Live(time.Now()) {
		return locker.Run{}, fmt.Errorf("kubernetes: slot %s: %w", slot, locker.ErrNoRun)
	}
	return r, nil
}

// LatestRun returns the live record with the latest At.
func (l *Locker) LatestRun(ctx context.Context) (locker.Run, error) {
	ls, err := l.get(ctx)
	if err != nil {
		return locker.Run{}, err
	}
	var all []locker.Run
	for _, r := range runsOf(ls) {
		all = append(all, r)
	}
	return locker.LatestOf(all, time.Now())
}

// runsOf decodes the runs annotation; a missing or unreadable one is empty.
func runsOf(ls *coordinationv1.Lease) map[string]locker.Run {
	runs := map[string]locker.Run{}
	if ls != nil {
		_ = json.Unmarshal([]byte(ls.Annotations[annRuns]), &runs)
	}
	return runs
}
