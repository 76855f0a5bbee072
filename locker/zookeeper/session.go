package zookeeper

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/hashicorp/go-hclog"
)

// zkSession is one ZooKeeper session over a go-zookeeper connection, with
// what the library does not expose: the negotiated timeout and the
// password (read from the server's connect response, see sniffConn), and
// the session's fate as a value that can be waited on.
type zkSession struct {
	conn      *zk.Conn
	closeOnce sync.Once

	mu           sync.Mutex
	id           int64
	passwd       []byte
	timeout      time.Duration // negotiated with the server
	expired      bool          // the server ended the session, or go-zookeeper replaced it
	disconnected time.Time     // when the connection broke; zero while connected
	changed      chan struct{} // closed and replaced on every change above
	current      net.Conn      // the connection go-zookeeper uses now
	// established is when the connection that last granted the session
	// was dialled: the server registered (a new session) or revalidated
	// it with the ensemble's leader, which counts the timeout from then
	// on, after this and before it answered (relay.go).
	established time.Time
	// shrunk says why the session cannot keep what renewals granted: a
	// reconnect negotiated a shorter timeout.
	shrunk string
	// pings are the latest pings answered on the current connection
	// (pings.go), npings how many were; none once that connection's
	// stream was in doubt.
	pings  [keptPings]activity
	npings int
	doubt  bool
}

// open starts a session and waits, bounded by ctx and DialTimeout, until
// the server granted it (and accepted our credentials).
func (l *Locker) open(ctx context.Context) (*zkSession, error) {
	s := &zkSession{changed: make(chan struct{})}
	dialer := func(network, addr string, timeout time.Duration) (net.Conn, error) {
		dialed := time.Now()
		c, err := net.DialTimeout(network, addr, timeout)
		if err != nil {
			return nil, err
		}
		sc := &sniffConn{Conn: c, s: s, dialed: dialed}
		s.mu.Lock()
		s.current = sc
		s.npings, s.doubt = 0, false // a new stream: nothing counted yet
		s.mu.Unlock()
		return sc, nil
	}
	conn, _, err := zk.Connect(l.servers, l.opts.TTL,
		zk.WithDialer(dialer),
		zk.WithLogger(zkLogger{l.log}),
		zk.WithEventCallback(s.onEvent),
	)
	if err != nil {
		return nil, fmt.Errorf("zookeeper: connect to %s: %w", strings.Join(l.servers, ","), err)
	}
	s.conn = conn
	dctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	for {
		s.mu.Lock()
		ready := s.id != 0 && s.timeout > 0 && s.disconnected.IsZero() && conn.State() == zk.StateHasSession
		ch := s.changed
		s.mu.Unlock()
		if ready {
			break
		}
		select {
		case <-ch:
		case <-dctx.Done():
			conn.Close()
			if ctx.Err() != nil {
				return nil, fmt.Errorf("zookeeper: no session from %s yet: %w", strings.Join(l.servers, ","), ctx.Err())
			}
			return nil, fmt.Errorf("zookeeper: no session from %s within %s", strings.Join(l.servers, ","), l.timeout)
		}
	}
	if l.auth != "" {
		if _, err := call(dctx, func() (struct{}, error) {
			return struct{}{}, conn.AddAuth("digest", []byte(l.auth))
		}); err != nil {
			conn.Close()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			// Never name the credentials: they are a secret.
			return nil, classify("zookeeper: digest authentication", err)
		}
	}
	return s, nil
}

// onEvent follows the session's state; go-zookeeper calls it for every
// event, in order, from its connection goroutine.
func (s *zkSession) onEvent(ev zk.Event) {
	if ev.Type != zk.EventSession {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch ev.State {
	case zk.StateExpired:
		s.expired = true
	case zk.StateDisconnected:
		if s.disconnected.IsZero() {
			s.disconnected = time.Now()
		}
	case zk.StateHasSession:
		// A different session (go-zookeeper quietly starts a new one after
		// an expiry) is caught by granted, which sees the server's answer
		// first.
		s.disconnected = time.Time{}
	default:
		return
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

// granted records the server's answer to a connect request.
func (s *zkSession) granted(id int64, timeout time.Duration, passwd []byte, dialed time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case id == 0:
		s.expired = true
	case s.id == 0:
		s.id, s.timeout, s.passwd = id, timeout, passwd
		s.established = dialed
	case s.id != id:
		s.expired = true
	default:
		if timeout < s.timeout && s.shrunk == "" {
			// A server with a lower maxSessionTimeout revalidated the
			// session: the leader counts the shorter timeout from now,
			// which may end before a deadline already granted.
			s.shrunk = fmt.Sprintf("a server cut the session timeout from %s to %s on reconnect", s.timeout, timeout)
		}
		s.timeout = min(s.timeout, timeout)
		s.established = dialed
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

// state returns the session's current state and a channel closed at its
// next change.
func (s *zkSession) state() (expired bool, disconnected time.Time, timeout time.Duration, changed <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.expired, s.disconnected, s.timeout, s.changed
}

// shrunkReason is why what was granted no longer holds, or "".
func (s *zkSession) shrunkReason() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shrunk
}

// establishedAt is when the connection that last granted the session was
// dialled (zkSession.established).
func (s *zkSession) establishedAt() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.established
}

// pinged records pings answered on c, or that c's stream is in doubt,
// when c is the connection in use.
func (s *zkSession) pinged(c *sniffConn, answered []activity, doubt bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.current != c || s.doubt {
		return
	}
	if doubt {
		s.npings, s.doubt = 0, true
		return
	}
	for _, a := range answered {
		s.pings[s.npings%len(s.pings)] = a
		s.npings++
	}
}

// pingActivities are the pings answered on the current connection, as
// relay activities.
func (s *zkSession) pingActivities() []activity {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]activity(nil), s.pings[:min(s.npings, len(s.pings))]...)
}

// dropConn closes the connection go-zookeeper uses now, so that it moves
// the session to the next server at once instead of waiting two thirds of
// the session timeout for a silent server to answer.
func (s *zkSession) dropConn() {
	s.mu.Lock()
	c := s.current
	s.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// ID is the session id.
func (s *zkSession) ID() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id
}

// close ends the session on the server (go-zookeeper sends closeSession),
// which deletes its ephemeral znodes.
// go-zookeeper's Close waits at most a second for the answer and must not
// be called twice.
func (s *zkSession) close() { s.closeOnce.Do(s.conn.Close) }

// sniffConn reads the server's connect response as it passes: the first
// frame on every connection. go-zookeeper keeps the negotiated timeout and
// the password to itself, and we need both (DESIGN §1.6: the granted TTL;
// ReleaseHandle: the password). It also picks go-zookeeper's pings and
// their answers out of the stream (pings.go).
type sniffConn struct {
	net.Conn
	s      *zkSession
	dialed time.Time

	mu    sync.Mutex // Read and Write run on different goroutines
	pings pingTracker
}

func (c *sniffConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		at := time.Now()
		c.mu.Lock()
		answered, head := c.pings.read(b[:n], at)
		if head != nil {
			if id, timeout, passwd, ok := parseConnectResponse(head); ok {
				c.pings.connected = true
				c.s.granted(id, timeout, passwd, c.dialed)
			} else {
				c.pings.doubt = true
			}
		}
		doubt := c.pings.doubt
		c.mu.Unlock()
		c.s.pinged(c, answered, doubt)
	}
	return n, err
}

func (c *sniffConn) Write(b []byte) (int, error) {
	sent := time.Now()
	n, err := c.Conn.Write(b)
	c.mu.Lock()
	c.pings.wrote(b[:n], sent, n == len(b))
	doubt := c.pings.doubt
	c.mu.Unlock()
	if doubt {
		c.s.pinged(c, nil, true)
	}
	return n, err
}

// parseConnectResponse decodes a framed ConnectResponse: length, protocol
// version, timeout in ms, session id, password (length-prefixed).
func parseConnectResponse(b []byte) (id int64, timeout time.Duration, passwd []byte, ok bool) {
	if len(b) < 4 {
		return 0, 0, nil, false
	}
	n := int(binary.BigEndian.Uint32(b))
	if n < 20 || len(b) < 4+n {
		return 0, 0, nil, false
	}
	f := b[4 : 4+n]
	timeout = time.Duration(int32(binary.BigEndian.Uint32(f[4:]))) * time.Millisecond
	id = int64(binary.BigEndian.Uint64(f[8:]))
	plen := int(int32(binary.BigEndian.Uint32(f[16:])))
	if plen < 0 || 20+plen > len(f) {
		return 0, 0, nil, false
	}
	return id, timeout, append([]byte(nil), f[20:20+plen]...), true
}

// call runs f, a blocking go-zookeeper call, and returns its result or
// ctx's error, whichever comes first (DESIGN §1.8). go-zookeeper calls take
// no context; an abandoned one ends when its connection answers, breaks
// (within two thirds of the session timeout) or is closed.
func call[T any](ctx context.Context, f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := f()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// zkLogger sends go-zookeeper's log lines to ours at debug level.
type zkLogger struct{ log hclog.Logger }

func (z zkLogger) Printf(format string, args ...any) {
	z.log.Debug("go-zookeeper: " + fmt.Sprintf(format, args...))
}
