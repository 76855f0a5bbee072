package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leaderrun/leaderrun/locker"
)

// Run records are persistent znodes /<chroot>/<prefix>/<key>/~run/<slot>
// ('~' never occurs in a key, and candidates' znodes start with '@').
// ZooKeeper deletes nothing on a timer unless the ensemble enables TTL
// nodes (extendedTypesEnabled, off by default), so a record past its
// Expires is ignored by lookups and deleted by the next RecordRun.

var _ locker.RunLog = (*Locker)(nil)

// runDir is where the key's run records live.
func (l *Locker) runDir() string { return l.dir + "/~run" }

// RecordRun writes the record in one multi that also checks that our
// znode still exists: it exists only while our session lives, and while
// it exists no other candidate leads (DESIGN §1.1). A lease that lost the
// key writes nothing.
func (l *Locker) RecordRun(ctx context.Context, ls locker.Lease, run locker.Run) error {
	if err := locker.ValidateSlot(run.Slot); err != nil {
		return fmt.Errorf("zookeeper: record run: slot %w", err)
	}
	s, ok := ls.(*lease)
	if !ok || !strings.HasPrefix(s.node, l.dir+"/@") {
		return fmt.Errorf("zookeeper: record run: not a lease of key %q", l.opts.Key)
	}
	if isLost(s) {
		return fmt.Errorf("zookeeper: record run of slot %s: %w: %s", run.Slot, locker.ErrLost, s.LostReason())
	}
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	if err := l.ensurePath(ctx, s.s, l.runDir()); err != nil {
		return err
	}
	path := l.runDir() + "/" + run.Slot
	check := &zk.CheckVersionRequest{Path: s.node, Version: -1}
	for attempt := 0; ; attempt++ {
		exists, err := call(ctx, func() (bool, error) {
			ok, _, err := s.s.conn.Exists(path)
			return ok, err
		})
		if err != nil {
			return classify(fmt.Sprintf("zookeeper: record run of slot %s", run.Slot), err)
		}
		var write any = &zk.CreateRequest{Path: path, Data: run.Record(), Acl: l.acl}
		if exists {
			write = &zk.SetDataRequest{Path: path, Data: run.Record(), Version: -1}
		}
		resps, err := call(ctx, func() ([]zk.MultiResponse, error) { return s.s.conn.Multi(check, write) })
		if err == nil {
			break
		}
		if len(resps) > 0 && errors.Is(resps[0].Error, zk.ErrNoNode) || sessionGone(err) {
			return fmt.Errorf("zookeeper: record run of slot %s: znode %s is gone: %w", run.Slot, s.node, locker.ErrLost)
		}
		// The record appeared or vanished between the two calls: once more.
		if attempt == 0 && (errors.Is(err, zk.ErrNodeExists) || errors.Is(err, zk.ErrNoNode)) {
			continue
		}
		return classify(fmt.Sprintf("zookeeper: record run of slot %s", run.Slot), err)
	}
	l.pruneRuns(ctx, s.s)
	return nil
}

// pruneRuns deletes the records past their Expires, as far as ctx allows.
func (l *Locker) pruneRuns(ctx context.Context, s *zkSession) {
	runs, err := l.readRunsWith(ctx, s, "")
	if err != nil {
		return
	}
	now := time.Now()
	for name, r := range runs {
		if !r.Live(now) {
			_, _ = call(ctx, func() (struct{}, error) {
				return struct{}{}, s.conn.Delete(l.runDir()+"/"+name, -1)
			})
		}
	}
}

// LookupRun reads the slot's record after a sync, so that the server we
// ask has caught up with the ensemble's leader.
func (l *Locker) LookupRun(ctx context.Context, slot string) (locker.Run, error) {
	if err := locker.ValidateSlot(slot); err != nil {
		return locker.Run{}, fmt.Errorf("zookeeper: look up run: slot %w", err)
	}
	runs, err := l.readRuns(ctx, slot)
	if err != nil {
		return locker.Run{}, err
	}
	if r, ok := runs[slot]; ok && r.Slot == slot && r.Live(time.Now()) {
		return r, nil
	}
	return locker.Run{}, fmt.Errorf("zookeeper: slot %s: %w", slot, locker.ErrNoRun)
}

// LatestRun returns the newest live record of the key.
func (l *Locker) LatestRun(ctx context.Context) (locker.Run, error) {
	runs, err := l.readRuns(ctx, "")
	if err != nil {
		return locker.Run{}, err
	}
	var all []locker.Run
	for _, r := range runs {
		all = append(all, r)
	}
	return locker.LatestOf(all, time.Now())
}

// readRuns reads one slot's record, or every record when slot is "",
// through the Locker's own session.
func (l *Locker) readRuns(ctx context.Context, slot string) (map[string]locker.Run, error) {
	s, err := l.reader.get(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	if _, err := call(ctx, func() (string, error) { return s.conn.Sync(l.dir) }); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return nil, classify(fmt.Sprintf("zookeeper: sync before reading run records of %q", l.opts.Key), err)
	}
	return l.readRunsWith(ctx, s, slot)
}

func (l *Locker) readRunsWith(ctx context.Context, s *zkSession, slot string) (map[string]locker.Run, error) {
	names := []string{slot}
	if slot == "" {
		var err error
		names, err = call(ctx, func() ([]string, error) {
			names, _, err := s.conn.Children(l.runDir())
			return names, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			return nil, nil
		}
		if err != nil {
			return nil, classify(fmt.Sprintf("zookeeper: list run records of %q", l.opts.Key), err)
		}
	}
	runs := map[string]locker.Run{}
	for _, name := range names {
		data, err := call(ctx, func() ([]byte, error) {
			data, _, err := s.conn.Get(l.runDir() + "/" + name)
			return data, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, classify(fmt.Sprintf("zookeeper: read run record %s of %q", name, l.opts.Key), err)
		}
		if r, err := locker.ParseRun(data); err == nil {
			runs[name] = r
		}
	}
	return runs, nil
}

// isLost reports whether the lease already knows it is lost.
func isLost(s *lease) bool {
	select {
	case <-s.Lost():
		return true
	default:
		return false
	}
}
