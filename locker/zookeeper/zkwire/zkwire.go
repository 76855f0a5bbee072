// Package zkwire is the part of ZooKeeper's client protocol that needs no
// client library: the settings leaderrun hands its guard, reading a server
// list and closing a session by its id and password. The small guard binary releases a leaderrun lease with it
// (DESIGN §1.4) without linking a ZooKeeper client; locker/zookeeper uses
// the same code for its ReleaseHandle.
package zkwire

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// DefaultServer is the server used when none is given.
const DefaultServer = "127.0.0.1:2181"

// DefaultTimeout bounds a connection attempt to one server when no other
// timeout is given.
const DefaultTimeout = 5 * time.Second

// SplitServers splits host:port entries (a single entry may hold a whole
// comma-separated connect string) and the chroot that may end the last one.
func SplitServers(raw []string) (servers []string, chroot string, err error) {
	var parts []string
	for _, r := range raw {
		for _, p := range strings.Split(r, ",") {
			if p = strings.TrimSpace(p); p != "" {
				parts = append(parts, p)
			}
		}
	}
	if len(parts) == 0 {
		parts = []string{DefaultServer}
	}
	for i, p := range parts {
		if at := strings.IndexByte(p, '/'); at >= 0 {
			if i != len(parts)-1 {
				return nil, "", fmt.Errorf("%q: a chroot path may only end the last server", p)
			}
			p, chroot = p[:at], p[at:]
		}
		host, port, err := net.SplitHostPort(p)
		if err != nil || host == "" {
			return nil, "", fmt.Errorf("%q: want host:port", p)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, "", fmt.Errorf("%q: port is not a number from 1 to 65535", p)
		}
		servers = append(servers, p)
	}
	return servers, chroot, nil
}

// Hello is how leaderrun's dead-man guard reaches the ensemble, as
// leaderrun's flags gave it. SessionTimeout is the one leaderrun asks for
// (its TTL), sent again when the guard takes the session over to close it.
type Hello struct {
	Servers []string `json:"servers,omitempty"`
	Chroot  string   `json:"chroot,omitempty"`
	Auth    string   `json:"auth,omitempty"`
	// AuthFile names the file holding Auth (--zk-auth-file): the guard
	// reads it when it releases, so the credentials stay off its pipe.
	AuthFile       string        `json:"auth_file,omitempty"`
	SessionTimeout time.Duration `json:"session_timeout,omitempty"`
}

// Handle names a leadership's session and znode: "<id>:<password>:<znode>",
// id and password in hex.
func Handle(id int64, passwd []byte, node string) string {
	return fmt.Sprintf("%x:%x:%s", id, passwd, node)
}

// ErrBadHandle says a string is not a Handle.
var ErrBadHandle = errors.New("not a session handle")

// ParseHandle undoes Handle.
func ParseHandle(handle string) (id int64, passwd []byte, node string, err error) {
	parts := strings.SplitN(handle, ":", 3)
	if len(parts) != 3 {
		return 0, nil, "", ErrBadHandle
	}
	u, err := strconv.ParseUint(parts[0], 16, 64)
	if err != nil || u == 0 {
		return 0, nil, "", ErrBadHandle
	}
	if passwd, err = hex.DecodeString(parts[1]); err != nil {
		return 0, nil, "", ErrBadHandle
	}
	return int64(u), passwd, parts[2], nil
}

// CloseSessionAny closes the session on the first server that answers,
// giving each server at most perServer. ttl is the session timeout sent
// when taking the session over; the server keeps the session's own.
func CloseSessionAny(ctx context.Context, servers []string, id int64, passwd []byte, ttl, perServer time.Duration) error {
	return ReleaseSessionAny(ctx, servers, id, passwd, "", "", ttl, perServer)
}

// CloseSession takes over the session on server with a ConnectRequest
// carrying its id and password, then sends closeSession (op -11). A server
// that no longer knows the session answers the connect with session id 0:
// the session is gone already, which is success. ctx bounds the whole
// exchange.
func CloseSession(ctx context.Context, server string, id int64, passwd []byte, ttl time.Duration) error {
	return releaseSession(ctx, server, id, passwd, "", "", ttl)
}

// ReleasedName is the name of a key's release record: a persistent znode
// beside the candidates' whose data names the last candidate znode
// released after its job was gone (locker/zookeeper, silent.go).
const ReleasedName = "~released"

// ReleaseSessionAny is CloseSessionAny for a leadership whose job is gone:
// on the first server that answers, it takes over the session, names its
// znode node in the key's release record (path.Dir(node)/ReleasedName),
// authenticating with digest credentials auth ("user:password") when
// given, and closes the session. A record that cannot be written (missing,
// or the server refuses) is left alone: the session is closed all the
// same, and a standby then waits out the TTL instead of taking the
// closing for a release.
func ReleaseSessionAny(ctx context.Context, servers []string, id int64, passwd []byte, auth, node string, ttl, perServer time.Duration) error {
	var errs []error
	for _, server := range servers {
		sctx, cancel := context.WithTimeout(ctx, perServer)
		err := releaseSession(sctx, server, id, passwd, auth, node, ttl)
		cancel()
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

// releaseSession is ReleaseSessionAny on one server (CloseSession with no
// node).
func releaseSession(ctx context.Context, server string, id int64, passwd []byte, auth, node string, ttl time.Duration) error {
	c, err := dial(ctx, server)
	if err != nil {
		return err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	if got, _, err := connect(c, server, id, passwd, ttl); err != nil || got == 0 {
		return err // got 0: the server no longer knows the session: it is gone
	}
	if auth != "" {
		// addAuth (op 100, xid -4): type 0, scheme, credentials. A
		// refusal ends the connection; then only closing is left, on
		// another server.
		req := binary.BigEndian.AppendUint32(nil, 0xfffffffc)
		req = binary.BigEndian.AppendUint32(req, 100)
		req = binary.BigEndian.AppendUint32(req, 0)
		req = appendString(req, "digest")
		req = appendString(req, auth)
		if code, err := roundTrip(c, server, req, -4); err != nil || code != 0 {
			return errors.Join(err, CloseSession(ctx, server, id, passwd, ttl))
		}
	}
	if i := strings.LastIndexByte(node, '/'); i > 0 {
		// setData (op 5): path, data, version -1.
		req := binary.BigEndian.AppendUint32(nil, 2)
		req = binary.BigEndian.AppendUint32(req, 5)
		req = appendString(req, node[:i]+"/"+ReleasedName)
		req = appendString(req, node[i+1:])
		req = binary.BigEndian.AppendUint32(req, 0xffffffff)
		if _, err := roundTrip(c, server, req, 2); err != nil {
			return err
		}
	}
	return closeSession(c, server)
}

// appendString appends a jute string or buffer: its length, then it.
func appendString(b []byte, s string) []byte {
	return append(binary.BigEndian.AppendUint32(b, uint32(len(s))), s...)
}

// roundTrip sends req and reads replies until the one with xid, skipping
// watch notifications and pings, and returns its error code.
func roundTrip(c net.Conn, server string, req []byte, xid int32) (int32, error) {
	if err := writeFrame(c, req); err != nil {
		return 0, err
	}
	for {
		reply, err := readFrame(c)
		if err != nil {
			return 0, err
		}
		if len(reply) < 16 {
			return 0, fmt.Errorf("%s: short reply", server)
		}
		if int32(binary.BigEndian.Uint32(reply)) == xid {
			return int32(binary.BigEndian.Uint32(reply[12:])), nil
		}
	}
}

// MinSessionTimeout asks server for the shortest session it grants: it
// opens a session asking for a timeout of 1ms, which the server raises to
// its minSessionTimeout (two ticks unless configured), and closes that
// session at once. ctx bounds the whole exchange.
func MinSessionTimeout(ctx context.Context, server string) (time.Duration, error) {
	return SessionTimeoutFor(ctx, server, time.Millisecond)
}

// SessionTimeoutFor opens a session on server asking for a timeout of ask,
// closes it at once, and returns the timeout the server granted: asking
// for 1ms learns its minSessionTimeout, asking for the most a request can
// carry (2^31-1 ms) its maxSessionTimeout. ctx bounds the whole exchange.
func SessionTimeoutFor(ctx context.Context, server string, ask time.Duration) (time.Duration, error) {
	c, err := dial(ctx, server)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	id, timeout, err := connect(c, server, 0, make([]byte, 16), ask)
	if err != nil {
		return 0, err
	}
	if id == 0 || timeout <= 0 {
		return 0, fmt.Errorf("%s: refused a new session", server)
	}
	return timeout, closeSession(c, server)
}

// dial connects to server, with ctx's deadline on the connection.
func dial(ctx context.Context, server string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", server)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	return c, nil
}

// connect sends a ConnectRequest for session id (0: a new one) and returns
// the session id and timeout the server answered with.
func connect(c net.Conn, server string, id int64, passwd []byte, ttl time.Duration) (int64, time.Duration, error) {
	req := binary.BigEndian.AppendUint32(nil, 0)                         // protocol version
	req = binary.BigEndian.AppendUint64(req, 0)                          // last zxid seen
	req = binary.BigEndian.AppendUint32(req, uint32(ttl.Milliseconds())) // timeout
	req = binary.BigEndian.AppendUint64(req, uint64(id))
	req = binary.BigEndian.AppendUint32(req, uint32(len(passwd)))
	req = append(req, passwd...)
	req = append(req, 0) // not read-only
	if err := writeFrame(c, req); err != nil {
		return 0, 0, err
	}
	resp, err := readFrame(c)
	if err != nil {
		return 0, 0, err
	}
	if len(resp) < 16 {
		return 0, 0, fmt.Errorf("%s: short connect response", server)
	}
	timeout := time.Duration(int32(binary.BigEndian.Uint32(resp[4:]))) * time.Millisecond
	return int64(binary.BigEndian.Uint64(resp[8:])), timeout, nil
}

// closeSession sends closeSession (op -11) for the session of c and waits
// for the answer.
func closeSession(c net.Conn, server string) error {
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
