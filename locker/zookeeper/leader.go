package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/zookeeper/zkwire"
)

// session is the Locker's own session for Leader, opened on first use and
// opened again once it expired. One caller opens it at a time, without
// holding mu: the others wait for that open or their own context, so a
// server that does not answer keeps no caller (a watch of the control
// record, a read of the leader, Close) past its own deadline.
type session struct {
	l       *Locker
	mu      sync.Mutex
	s       *zkSession
	opening chan struct{} // closed once the open under way ended
	closed  bool
}

func (r *session) get(ctx context.Context) (*zkSession, error) {
	for {
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			return nil, errClosed
		}
		if r.s != nil {
			if expired, _, _, _ := r.s.state(); !expired {
				s := r.s
				r.mu.Unlock()
				return s, nil
			}
			r.s.close()
			r.s = nil
		}
		if wait := r.opening; wait != nil {
			r.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, fmt.Errorf("zookeeper: no session from %s yet: %w", strings.Join(r.l.servers, ","), ctx.Err())
			}
		}
		done := make(chan struct{})
		r.opening = done
		r.mu.Unlock()
		s, err := r.l.open(ctx)
		r.mu.Lock()
		r.opening = nil
		close(done)
		switch {
		case err != nil:
			r.mu.Unlock()
			return nil, err
		case r.closed:
			r.mu.Unlock()
			s.close()
			return nil, errClosed
		}
		r.s = s
		r.mu.Unlock()
		return s, nil
	}
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
		return locker.Holder{}, classify(fmt.Sprintf("zookeeper: sync before reading the leader of %q", l.opts.Name()), err)
	}
	for {
		type kids struct {
			names []string
			stat  *zk.Stat
		}
		k, err := call(ctx, func() (kids, error) {
			names, stat, err := s.conn.Children(l.dir)
			return kids{names, stat}, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			return locker.Holder{}, l.neverUsed()
		}
		if err != nil {
			return locker.Holder{}, classify(fmt.Sprintf("zookeeper: read leader of %q", l.opts.Name()), err)
		}
		names := candidates(k.names)
		if len(names) == 0 {
			if !traced(k.names, k.stat) {
				return locker.Holder{}, l.neverUsed()
			}
			return locker.Holder{}, fmt.Errorf("zookeeper: key %q: %w", l.opts.Name(), locker.ErrNoLeader)
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
			return locker.Holder{}, classify(fmt.Sprintf("zookeeper: read leader of %q", l.opts.Name()), err)
		}
		h := locker.ParseHolder(g.data)
		h.Epoch = uint64(g.stat.Czxid)
		return h, nil
	}
}

// traced reports whether the key's znode, with no candidate under it now,
// shows it was used: once-per records, a history, or a child that is gone (the
// cversion counts every create and delete of a child, and only candidates
// are ever deleted). A znode whose children are all still there and are
// other keys' paths ("team" for the key "team/a") was only made as their
// parent.
func traced(children []string, stat *zk.Stat) bool {
	for _, n := range children {
		if n == "~run" || n == "~term" || n == releasedName || n == lastName {
			return true
		}
	}
	return stat == nil || int(stat.Cversion) != len(children)
}

// neverUsed is Leader's answer for a key whose znode is absent, or was
// only made as the parent of other keys: it names the znode and servers.
func (l *Locker) neverUsed() error {
	return &locker.NeverUsedError{Key: l.opts.Name(),
		Where:  "znode " + l.dir + " on ZooKeeper " + strings.Join(l.servers, ","),
		Fields: []string{"Servers", "Chroot", "Prefix"}}
}

// ReleaseHandle ends the session named by a Lease.Handle of this key: it
// connects with the session's id and password, as a client moving to
// another server would, names its znode in the key's release record (its
// job is gone: silent.go), and closes it, which deletes its znode at once.
// A session already gone is not an error. A handle for another key is
// refused.
func (l *Locker) ReleaseHandle(ctx context.Context, handle string) error {
	id, passwd, node, err := parseHandle(handle, l.dir)
	if err != nil {
		return err
	}
	return zkwire.ReleaseSessionAny(ctx, l.servers, id, passwd, l.auth, node, l.opts.TTL, l.timeout)
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
