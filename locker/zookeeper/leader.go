package zookeeper

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leaderrun/leaderrun/locker"
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
	var errs []error
	for _, server := range l.servers {
		err := closeSession(ctx, server, id, passwd, l.opts.TTL, l.timeout)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return fmt.Errorf("zookeeper: close session %x: %w", id, errors.Join(errs...))
}

// closeSession speaks just enough of ZooKeeper's client protocol to take
// over a session and close it: a ConnectRequest with the session's id and
// password, then a closeSession request (op -11).
func closeSession(ctx context.Context, server string, id int64, passwd []byte, ttl, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", server)
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()

	req := binary.BigEndian.AppendUint32(nil, 0)                         // protocol version
	req = binary.BigEndian.AppendUint64(req, 0)                          // last zxid seen
	req = binary.BigEndian.AppendUint32(req, uint32(ttl.Milliseconds())) // timeout
	req = binary.BigEndian.AppendUint64(req, uint64(id))
	req = binary.BigEndian.AppendUint32(req, uint32(len(passwd)))
	req = append(req, passwd...)
	req = append(req, 0) // not read-only
	if err := writeFrame(c, req); err != nil {
		return err
	}
	resp, err := readFrame(c)
	if err != nil {
		return err
	}
	if len(resp) < 16 {
		return fmt.Errorf("%s: short connect response", server)
	}
	if binary.BigEndian.Uint64(resp[8:]) == 0 {
		return nil // the server no longer knows the session: it is gone
	}
	closeReq := binary.BigEndian.AppendUint32(nil, 1)              // xid
	closeReq = binary.BigEndian.AppendUint32(closeReq, 0xfffffff5) // -11: closeSession
	if err := writeFrame(c, closeReq); err != nil {
		return err
	}
	reply, err := readFrame(c)
	if err != nil {
		return err
	}
	if len(reply) < 16 {
		return fmt.Errorf("%s: short closeSession reply", server)
	}
	if code := int32(binary.BigEndian.Uint32(reply[12:])); code != 0 {
		return fmt.Errorf("%s: closeSession answered with error code %d", server, code)
	}
	return nil
}

func writeFrame(w io.Writer, b []byte) error {
	_, err := w.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...))
	return err
}

func readFrame(r io.Reader) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > 1<<20 {
		return nil, fmt.Errorf("frame of %d bytes is not a ZooKeeper reply", size)
	}
	b := make([]byte, size)
	_, err := io.ReadFull(r, b)
	return b, err
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
