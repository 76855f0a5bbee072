package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/records"
)

// The key's records (package records) are persistent znodes under the
// key's znode; '~' never occurs in a key's path segments and candidates'
// znodes start with '@' (only those are ever ordered or read as holders),
// so none collides with anything else under the key:
//
//   - the control record, /<chroot>/<prefix>/<key>/~control, under the
//     key itself for every one of its slot keys (locker.Options.Key): a
//     Locker of "jobs~2" reads and writes the record of "jobs". Its
//     version is the znode's dataVersion as "v<n>" ("" never names an
//     existing record); a write is a create (no version yet: it must not
//     exist) or a setData conditioned on the version read. Leader's "was
//     this key ever used?" (traced) does not count it: a pause set on a
//     key nobody ran yet leaves the key never used;
//   - term records, /<chroot>/<prefix>/<key>/~term/<TermName(epoch)>:
//     zero-padded epochs, so the children sort as the terms do; a record
//     is a setData (a refused setData and a create for a term's first
//     record);
//   - run records, /<chroot>/<prefix>/<key>/~run/<slot>, written in one
//     multi that also checks that our election znode still exists: it
//     exists only while our session lives, and while it exists no other
//     candidate leads (DESIGN §1.1). ZooKeeper deletes nothing on a
//     timer unless the ensemble enables TTL nodes (off by default), so a
//     record past its Expires is ignored by lookups and deleted by the
//     next RecordRun.
//
// Every read syncs first, as Leader does, so that the server we ask has
// caught up with the ensemble's leader. Everything goes through the
// Locker's own session (the one of Leader), never a lease's: a lease's
// relay bookkeeping (relay.go) counts only the requests it sends itself,
// so a read of the records neither helps nor hurts what a renewal may
// claim, and a holder's WaitControl watch lives on a session whose loss
// costs no leadership (only RecordRun uses the lease's session, for the
// check that must be in the same multi).
//
// WaitControl holds one data (or exists) watch on the control znode,
// shared by every waiter of the Locker and kept from one call to the next
// while it has not fired: idle, it costs the watch on the server and the
// session's pings, and nothing else.

// controlNode is the znode name of the control record under the key.
const controlNode = "~control"

// store is the Locker's records.Store.
type store struct{ l *Locker }

var _ records.Waiter = store{}

// newRecords builds the Locker's records core.
func newRecords(l *Locker) *records.Core {
	return records.New(records.Config{
		Store: store{l}, Name: "zookeeper", Key: l.opts.Key, Timeout: l.timeout, Log: l.log,
		Final: func(err error) bool { return errors.Is(err, errClosed) },
	})
}

// controlPath is where the key's control record lives.
func (l *Locker) controlPath() string {
	root := strings.TrimSuffix(l.dir, l.opts.Name()) // /<chroot>/<prefix>/
	return root + l.opts.Key + "/" + controlNode
}

// dirOf is the znode under which the records of kind live (Term, Run).
func (s store) dirOf(kind records.Kind) string {
	if kind == records.Term {
		return s.l.dir + "/~term"
	}
	return s.l.dir + "/~run"
}

func (s store) path(kind records.Kind, name string) string {
	if kind == records.Control {
		return s.l.controlPath()
	}
	return s.dirOf(kind) + "/" + name
}

// version names a znode's dataVersion.
func version(stat *zk.Stat) string {
	return "v" + strconv.FormatInt(int64(stat.Version), 10)
}

// parseVersion undoes version.
func parseVersion(v string) (int32, bool) {
	n, err := strconv.ParseInt(strings.TrimPrefix(v, "v"), 10, 32)
	if err != nil || !strings.HasPrefix(v, "v") || n < 0 || version(&zk.Stat{Version: int32(n)}) != v {
		return 0, false
	}
	return int32(n), true
}

// sync has the server we ask catch up with the ensemble's leader.
func (s store) sync(ctx context.Context, zs *zkSession, p string) error {
	if _, err := call(ctx, func() (string, error) { return zs.conn.Sync(p) }); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return classify("zookeeper: sync before reading "+p, err)
	}
	return nil
}

func (s store) Get(ctx context.Context, kind records.Kind, name string) ([]byte, string, bool, error) {
	zs, err := s.l.reader.get(ctx)
	if err != nil {
		return nil, "", false, err
	}
	value, v, ok, _, err := s.read(ctx, zs, s.path(kind, name), false)
	return value, v, ok, err
}

// read syncs and reads the znode at p; with watch, it also arms a watch
// that fires at its next change (or creation) and returns its channel.
func (s store) read(ctx context.Context, zs *zkSession, p string, watch bool) ([]byte, string, bool, <-chan zk.Event, error) {
	if err := s.sync(ctx, zs, p); err != nil {
		return nil, "", false, nil, err
	}
	type got struct {
		data []byte
		stat *zk.Stat
		ch   <-chan zk.Event
	}
	for {
		g, err := call(ctx, func() (got, error) {
			if !watch {
				data, stat, err := zs.conn.Get(p)
				return got{data, stat, nil}, err
			}
			data, stat, ch, err := zs.conn.GetW(p)
			return got{data, stat, ch}, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			if !watch {
				return nil, "", false, nil, nil
			}
			type ex struct {
				ok bool
				ch <-chan zk.Event
			}
			e, err := call(ctx, func() (ex, error) {
				ok, _, ch, err := zs.conn.ExistsW(p)
				return ex{ok, ch}, err
			})
			if err != nil {
				return nil, "", false, nil, classify("zookeeper: read "+p, err)
			}
			if e.ok {
				continue // created between the two calls: read it
			}
			return nil, "", false, e.ch, nil
		}
		if err != nil {
			return nil, "", false, nil, classify("zookeeper: read "+p, err)
		}
		return g.data, version(g.stat), true, g.ch, nil
	}
}

// Swap creates the znode (prev empty) or sets it conditioned on prev.
func (s store) Swap(ctx context.Context, kind records.Kind, name, prev string, value []byte) (string, error) {
	zs, err := s.l.reader.get(ctx)
	if err != nil {
		return "", err
	}
	p := s.path(kind, name)
	what := "zookeeper: write " + p
	if prev == "" {
		create := func() (string, error) { return zs.conn.Create(p, value, 0, s.l.acl) }
		_, err := call(ctx, create)
		if errors.Is(err, zk.ErrNoNode) { // the key's znode is not there yet
			if err := s.l.ensurePath(ctx, zs, p[:strings.LastIndex(p, "/")]); err != nil {
				return "", err
			}
			_, err = call(ctx, create)
		}
		switch {
		case errors.Is(err, zk.ErrNodeExists):
			return "", fmt.Errorf("%s: %w", what, locker.ErrConflict)
		case err != nil:
			return "", classify(what, err)
		}
		return version(&zk.Stat{Version: 0}), nil // a new znode's first version
	}
	n, ok := parseVersion(prev)
	if !ok {
		return "", fmt.Errorf("%s: version %q is none of this backend's: %w", what, prev, locker.ErrConflict)
	}
	stat, err := call(ctx, func() (*zk.Stat, error) { return zs.conn.Set(p, value, n) })
	switch {
	case errors.Is(err, zk.ErrBadVersion), errors.Is(err, zk.ErrNoNode):
		return "", fmt.Errorf("%s: %w", what, locker.ErrConflict)
	case err != nil:
		return "", classify(what, err)
	}
	return version(stat), nil
}

// Put sets the znode, or creates it (and its parents) when it is not
// there.
func (s store) Put(ctx context.Context, kind records.Kind, name string, value []byte) error {
	zs, err := s.l.reader.get(ctx)
	if err != nil {
		return err
	}
	p := s.path(kind, name)
	what := "zookeeper: write " + p
	for attempt := 0; ; attempt++ {
		_, err := call(ctx, func() (*zk.Stat, error) { return zs.conn.Set(p, value, -1) })
		if err == nil {
			return nil
		}
		if !errors.Is(err, zk.ErrNoNode) {
			return classify(what, err)
		}
		create := func() (string, error) { return zs.conn.Create(p, value, 0, s.l.acl) }
		_, err = call(ctx, create)
		if errors.Is(err, zk.ErrNoNode) { // the key's first record of kind
			if err := s.l.ensurePath(ctx, zs, s.dirOf(kind)); err != nil {
				return err
			}
			_, err = call(ctx, create)
		}
		if err == nil {
			return nil
		}
		// Created by another writer (a term's guard) between the two
		// calls: replace it once more.
		if attempt == 0 && errors.Is(err, zk.ErrNodeExists) {
			continue
		}
		return classify(what, err)
	}
}

// PutHeld writes the znode in one multi with a check that the lease's
// election znode still exists, through the lease's own session.
func (s store) PutHeld(ctx context.Context, ls locker.Lease, kind records.Kind, name string, value []byte, _ time.Time) error {
	ours, ok := ls.(*lease)
	if !ok || !strings.HasPrefix(ours.node, s.l.dir+"/@") {
		return fmt.Errorf("zookeeper: record run: not a lease of key %q", s.l.opts.Name())
	}
	p := s.path(kind, name)
	what := "zookeeper: write " + p
	select {
	case <-ours.Lost():
		return fmt.Errorf("%s: %w: %s", what, locker.ErrLost, ours.LostReason())
	default:
	}
	if err := s.l.ensurePath(ctx, ours.s, s.dirOf(kind)); err != nil {
		return err
	}
	check := &zk.CheckVersionRequest{Path: ours.node, Version: -1}
	for attempt := 0; ; attempt++ {
		exists, err := call(ctx, func() (bool, error) {
			ok, _, err := ours.s.conn.Exists(p)
			return ok, err
		})
		if err != nil {
			return classify(what, err)
		}
		var write any = &zk.CreateRequest{Path: p, Data: value, Acl: s.l.acl}
		if exists {
			write = &zk.SetDataRequest{Path: p, Data: value, Version: -1}
		}
		resps, err := call(ctx, func() ([]zk.MultiResponse, error) { return ours.s.conn.Multi(check, write) })
		if err == nil {
			return nil
		}
		if len(resps) > 0 && errors.Is(resps[0].Error, zk.ErrNoNode) || sessionGone(err) {
			return fmt.Errorf("%s: znode %s is gone: %w", what, ours.node, locker.ErrLost)
		}
		// The record appeared or vanished between the two calls: once more.
		if attempt == 0 && (errors.Is(err, zk.ErrNodeExists) || errors.Is(err, zk.ErrNoNode)) {
			continue
		}
		return classify(what, err)
	}
}

// List syncs and lists the children of kind's znode, reading each when
// asked for values.
func (s store) List(ctx context.Context, kind records.Kind, values bool) ([]records.Entry, error) {
	zs, err := s.l.reader.get(ctx)
	if err != nil {
		return nil, err
	}
	dir := s.dirOf(kind)
	if err := s.sync(ctx, zs, dir); err != nil {
		return nil, err
	}
	names, err := call(ctx, func() ([]string, error) {
		names, _, err := zs.conn.Children(dir)
		return names, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, classify("zookeeper: list "+dir, err)
	}
	out := make([]records.Entry, 0, len(names))
	for _, name := range names {
		e := records.Entry{Name: name}
		if values {
			data, err := call(ctx, func() ([]byte, error) {
				data, _, err := zs.conn.Get(dir + "/" + name)
				return data, err
			})
			if errors.Is(err, zk.ErrNoNode) {
				continue // deleted meanwhile
			}
			if err != nil {
				return nil, classify("zookeeper: read "+dir+"/"+name, err)
			}
			e.Value = data
		}
		out = append(out, e)
	}
	return out, nil
}

func (s store) Delete(ctx context.Context, kind records.Kind, name string) error {
	zs, err := s.l.reader.get(ctx)
	if err != nil {
		return err
	}
	p := s.path(kind, name)
	_, err = call(ctx, func() (struct{}, error) { return struct{}{}, zs.conn.Delete(p, -1) })
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return classify("zookeeper: delete "+p, err)
	}
	return nil
}

// controlWatch is the watch WaitControl keeps on the record.
type controlWatch struct {
	mu sync.Mutex
	s  *zkSession
	ch <-chan zk.Event
}

// take returns the watch armed on session s, or nil when there is none or
// it fired.
func (w *controlWatch) take(s *zkSession) <-chan zk.Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.s != s || w.ch == nil {
		return nil
	}
	select {
	case <-w.ch:
		w.s, w.ch = nil, nil
		return nil
	default:
		return w.ch
	}
}

func (w *controlWatch) keep(s *zkSession, ch <-chan zk.Event) {
	w.mu.Lock()
	w.s, w.ch = s, ch
	w.mu.Unlock()
}

// WaitControl reads the record with a watch armed since before the read;
// while its version is still version, it waits for the watch to fire (a
// change, or the watch ended with the session) and reads again.
func (s store) WaitControl(ctx context.Context, v string) ([]byte, string, bool, error) {
	value, got, ok, zs, ch, err := s.armControl(ctx)
	if err != nil || got != v {
		return value, got, ok, err
	}
	if err := waitWatch(ctx, zs, ch); err != nil {
		return nil, "", false, err
	}
	value, got, ok, _, _, err = s.armControl(ctx)
	return value, got, ok, err
}

// armControl reads the record and returns it with a watch armed since
// before the read: the one kept from an earlier call if it has not fired,
// else a new one.
func (s store) armControl(ctx context.Context) ([]byte, string, bool, *zkSession, <-chan zk.Event, error) {
	zs, err := s.l.reader.get(ctx)
	if err != nil {
		return nil, "", false, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.l.timeout)
	defer cancel()
	p := s.l.controlPath()
	if ch := s.l.ctlWatch.take(zs); ch != nil {
		value, v, ok, _, err := s.read(ctx, zs, p, false)
		return value, v, ok, zs, ch, err
	}
	value, v, ok, ch, err := s.read(ctx, zs, p, true)
	if err != nil {
		return nil, "", false, nil, nil, err
	}
	s.l.ctlWatch.keep(zs, ch)
	return value, v, ok, zs, ch, nil
}

// waitWatch returns nil when the watch fires (a change of the record, or
// the watch ended with the session) or the session expired, and ctx.Err()
// when ctx ends first. A broken connection alone ends nothing: the client
// sets the watch again when it reconnects, with the zxid it last saw, so
// a change made meanwhile still fires it.
func waitWatch(ctx context.Context, s *zkSession, ch <-chan zk.Event) error {
	for {
		expired, _, _, changed := s.state()
		if expired {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
			return nil
		case <-changed:
		}
	}
}
