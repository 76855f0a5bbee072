package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/zookeeper/zkwire"
)

// session is the Locker's own session for Leader, opened on first use and
// opened again once it expired.
type session struct {
	l      *Locker
	mu     sync.Mutex
	s      *zkSession
	closed bool
}

func (r *session) get(ctx context.Context) (*zkSession, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, errClosed
	}
	if r.s != nil {
		if expired, _, _, _ := r.s.state(); !expired {
			return r.s, nil
		}
		r.s.close()
		r.s = nil
	}
	s, err := r.l.open(ctx)
	if err != nil {
		return nil, err
	}
	r.s = s
	return s, nil
}

// Leader reads who leads the key: the candidate znode with the lowest
// sequence, after a sync so that the server we ask has caught up with the
// ensemble's leader. Its czxid is the epoch. ZooKeeper does not say how
// long a session has left, so LeaseRemaining stays zero.
func (l *Locker) Leader(ctx context.Context) (locker.Holder, error) {
	s, err := l.reader.get(ctx)
	if err != nil {
		return locker.Holder{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	if _, err := call(ctx, func() (string, error) { return s.conn.Sync(l.dir) }); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return locker.Holder{}, classify(fmt.Sprintf("zookeeper: sync before reading the leader of %q", l.opts.Key), err)
	}
	for {
		names, err := call(ctx, func() ([]string, error) {
			names, _, err := s.conn.Children(l.dir)
			return names, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			return locker.Holder{}, fmt.Errorf("zookeeper: key %q: %w", l.opts.Key, locker.ErrNoLeader)
		}
		if err != nil {
			return locker.Holder{}, classify(fmt.Sprintf("zookeeper: read leader of %q", l.opts.Key), err)
		}
		names = candidates(names)
		if len(names) == 0 {
			return locker.Holder{}, fmt.Errorf("zookeeper: key %q: %w", l.opts.Key, locker.ErrNoLeader)
		}
		type got struct {
			data []byte
			stat *zk.Stat
		}
		g, err := call(ctx, func() (got, error) {
			data, stat, err := s.conn.Get(l.dir + "/" + names[0])
			return got{data, stat}, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			continue // released between the two reads: look again
		}
		if err != nil {
			return locker.Holder{}, classify(fmt.Sprintf("zookeeper: read leader of %q", l.opts.Key), err)
		}
		h := locker.ParseHolder(g.data)
		h.Epoch = uint64(g.stat.Czxid)
		return h, nil
	}
}

// ReleaseHandle ends the session named by a Lease.Handle of this key: it
// connects with the session's id and password, as a client moving to
// another server would, and closes it, which deletes its znode at once. A
// session already gone is not an error. A handle for another key is
// refused.
func (l *Locker) ReleaseHandle(ctx context.Context, handle string) error {
	id, passwd, _, err := parseHandle(handle, l.dir)
	if err != nil {
		return err
	}
	return zkwire.CloseSessionAny(ctx, l.servers, id, passwd, l.opts.TTL, l.timeout)
}

// Close frees the Locker's own session. It does not release a held lease.
func (l *Locker) Close() error {
	l.reader.mu.Lock()
	defer l.reader.mu.Unlock()
	l.reader.closed = true
	if l.reader.s != nil {
		l.reader.s.close()
		l.reader.s = nil
	}
	return nil
}
