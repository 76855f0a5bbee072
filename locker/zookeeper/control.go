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

	"github.com/leaderrun/leaderrun/internal/retry"
	"github.com/leaderrun/leaderrun/locker"
)

// The key's control record (locker.Controls) is the persistent znode
// /<chroot>/<prefix>/<key>/~control, under the key itself for every one
// of its slot keys (locker.ControlKey): a Locker of "jobs~2" reads and
// writes the record of "jobs". Like ~run and ~term it cannot collide
// with anything else under the key: candidates' znodes start with '@'
// (and only those are ever ordered or read as holders), and no key has a
// path segment starting with '~'. Leader's "was this key ever used?"
// (traced) does not count it: a pause set on a key nobody ran yet leaves
// the key never used.
//
// The version is the znode's dataVersion as "v<n>" ("" never names an
// existing record). A write is a create (no version yet: it must not
// exist) or a setData conditioned on the version read. Control and
// WaitControl sync first, as Leader does, so that the server we ask has
// caught up with the ensemble's leader.
//
// Everything goes through the Locker's own session (the one of Leader
// and the history), never a lease's: a lease's relay bookkeeping
// (relay.go) counts only the requests it sends itself, so a control read
// neither helps nor hurts what a renewal may claim, and a holder's
// WaitControl watch lives on a session whose loss costs no leadership.
//
// WaitControl holds one data (or exists) watch on the znode, shared by
// every waiter of the Locker and kept from one call to the next while it
// has not fired: idle, it costs the watch on the server and the session's
// pings, and nothing else.

// controlNode is the znode name of the control record under the key.
const controlNode = "~control"

var _ locker.Controls = (*Locker)(nil)

// controlPath is where the key's control record lives.
func (l *Locker) controlPath() string {
	root := strings.TrimSuffix(l.dir, l.opts.Key) // /<chroot>/<prefix>/
	return root + locker.ControlKey(l.opts.Key) + "/" + controlNode
}

// controlVersion names a znode's dataVersion.
func controlVersion(stat *zk.Stat) string {
	return "v" + strconv.FormatInt(int64(stat.Version), 10)
}

// parseControlVersion undoes controlVersion.
func parseControlVersion(v string) (int32, bool) {
	n, err := strconv.ParseInt(strings.TrimPrefix(v, "v"), 10, 32)
	if err != nil || !strings.HasPrefix(v, "v") || n < 0 || controlVersion(&zk.Stat{Version: int32(n)}) != v {
		return 0, false
	}
	return int32(n), true
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

// Control reads the key's control record after a sync.
func (l *Locker) Control(ctx context.Context) (locker.Control, error) {
	s, err := l.reader.get(ctx)
	if err != nil {
		return locker.Control{}, err
	}
	c, _, err := l.readControl(ctx, s, false)
	return c, err
}

// readControl syncs and reads the record; with watch, it also arms a watch
// that fires at its next change (or creation) and returns its channel.
func (l *Locker) readControl(ctx context.Context, s *zkSession, watch bool) (locker.Control, <-chan zk.Event, error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	p := l.controlPath()
	what := fmt.Sprintf("zookeeper: read the control record of %q", locker.ControlKey(l.opts.Key))
	if _, err := call(ctx, func() (string, error) { return s.conn.Sync(p) }); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return locker.Control{}, nil, classify(what+": sync", err)
	}
	type got struct {
		data []byte
		stat *zk.Stat
		ch   <-chan zk.Event
	}
	for {
		g, err := call(ctx, func() (got, error) {
			if !watch {
				data, stat, err := s.conn.Get(p)
				return got{data, stat, nil}, err
			}
			data, stat, ch, err := s.conn.GetW(p)
			return got{data, stat, ch}, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			if !watch {
				return locker.Control{}, nil, nil
			}
			type ex struct {
				ok bool
				ch <-chan zk.Event
			}
			e, err := call(ctx, func() (ex, error) {
				ok, _, ch, err := s.conn.ExistsW(p)
				return ex{ok, ch}, err
			})
			if err != nil {
				return locker.Control{}, nil, classify(what, err)
			}
			if e.ok {
				continue // created between the two calls: read it
			}
			return locker.Control{}, e.ch, nil
		}
		if err != nil {
			return locker.Control{}, nil, classify(what, err)
		}
		c, err := locker.ParseControl(g.data, controlVersion(g.stat))
		if err != nil {
			return locker.Control{}, nil, fmt.Errorf("%s: znode %s: %w", what, p, err)
		}
		return c, g.ch, nil
	}
}

// SetControl creates the record (c.Version empty) or sets it conditioned
// on c.Version; see locker.Controls.
func (l *Locker) SetControl(ctx context.Context, c locker.Control) (string, error) {
	s, err := l.reader.get(ctx)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	p := l.controlPath()
	key := locker.ControlKey(l.opts.Key)
	what := fmt.Sprintf("zookeeper: write the control record of %q", key)
	data := c.Record()
	if c.Version == "" {
		create := func() (string, error) { return s.conn.Create(p, data, 0, l.acl) }
		_, err := call(ctx, create)
		if errors.Is(err, zk.ErrNoNode) { // the key's znode is not there yet
			if err := l.ensurePath(ctx, s, p[:strings.LastIndex(p, "/")]); err != nil {
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
		return controlVersion(&zk.Stat{Version: 0}), nil // a new znode's first version
	}
	version, ok := parseControlVersion(c.Version)
	if !ok {
		return "", fmt.Errorf("%s: version %q is none of this backend's: %w", what, c.Version, locker.ErrConflict)
	}
	stat, err := call(ctx, func() (*zk.Stat, error) { return s.conn.Set(p, data, version) })
	switch {
	case errors.Is(err, zk.ErrBadVersion), errors.Is(err, zk.ErrNoNode):
		return "", fmt.Errorf("%s: %w", what, locker.ErrConflict)
	case err != nil:
		return "", classify(what, err)
	}
	return controlVersion(stat), nil
}

// WaitControl returns the record once its version differs from version;
// see locker.Controls. Failed reads are retried until ctx ends, except
// refusals and a closed Locker.
func (l *Locker) WaitControl(ctx context.Context, version string) (locker.Control, error) {
	backoff := retry.Backoff{Min: 100 * time.Millisecond, Max: 2 * time.Second}
	for {
		if err := ctx.Err(); err != nil {
			return locker.Control{}, err
		}
		c, s, ch, err := l.armControl(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return locker.Control{}, ctx.Err()
			}
			if errors.Is(err, locker.ErrRefused) || errors.Is(err, errClosed) {
				return locker.Control{}, err
			}
			l.log.Debug("reading the control record failed; retrying", "znode", l.controlPath(), "error", err)
			if !retry.Sleep(ctx, backoff.Next()) {
				return locker.Control{}, ctx.Err()
			}
			continue
		}
		backoff.Reset()
		if c.Version != version {
			return c, nil
		}
		if err := waitWatch(ctx, s, ch); err != nil {
			return locker.Control{}, err
		}
	}
}

// armControl reads the record and returns it with a watch armed since
// before the read: the one kept from an earlier call if it has not fired,
// else a new one.
func (l *Locker) armControl(ctx context.Context) (locker.Control, *zkSession, <-chan zk.Event, error) {
	s, err := l.reader.get(ctx)
	if err != nil {
		return locker.Control{}, nil, nil, err
	}
	if ch := l.ctlWatch.take(s); ch != nil {
		c, _, err := l.readControl(ctx, s, false)
		return c, s, ch, err
	}
	c, ch, err := l.readControl(ctx, s, true)
	if err != nil {
		return locker.Control{}, nil, nil, err
	}
	l.ctlWatch.keep(s, ch)
	return c, s, ch, nil
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
