package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/leaserow"
)

// controlDDL creates the control table (examples/postgres.sql too): one
// row per key, the record (JSON) and a version counter.
func (s *store) controlDDL() []string {
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + s.control + ` (
	key     text PRIMARY KEY,
	record  text NOT NULL,
	version bigint NOT NULL
)`,
	}
}

// prepareControl prepares the control table (prepareTable). missing is
// true when it does not exist and a read is to find no record: read-only,
// or its creation was refused (a role that may not create tables, on
// tables a DBA made before this one existed); a read then no longer tries
// to create it. A write is refused then, in one line naming the DDL.
func (s *store) prepareControl(ctx context.Context, write bool) (missing bool, err error) {
	missing, err = s.prepareTable(ctx, s.control, "control", s.controlDDL(), &s.ctlReady, &s.ctlRefused, write)
	switch {
	case write && missing && err == nil:
		return false, fmt.Errorf("postgres: %w: write the control record: no table %s, and opened read-only (a DBA can run examples/postgres.sql)", locker.ErrRefused, s.control)
	case !write && missing && err != nil:
		s.log.Debug("the control table is missing and may not be created; reading no control record", "error", err)
		return true, nil
	}
	return missing, err
}

// ReadControl reads the key's control row from the primary.
func (s *store) ReadControl(ctx context.Context) ([]byte, uint64, error) {
	missing, err := s.prepareControl(ctx, false)
	if err != nil {
		return nil, 0, err
	}
	if missing {
		return nil, 0, leaserow.ErrNoRow
	}
	var rec string
	var version int64
	err = s.pool.QueryRow(ctx, `SELECT record, version FROM `+s.control+` WHERE key = $1`, s.ctlKey).Scan(&rec, &version)
	switch {
	case errors.Is(err, pgx.ErrNoRows), s.readOnly && code(err) == "42P01":
		return nil, 0, leaserow.ErrNoRow
	case err != nil:
		return nil, 0, s.classify("read the control record", err)
	}
	return []byte(rec), uint64(version), nil
}

// WriteControl inserts the key's control row at version 1 when prev is 0
// (nothing when there is one already), else replaces it at version prev,
// and notifies the table's channel in the same statement when it wrote.
func (s *store) WriteControl(ctx context.Context, prev uint64, value []byte) error {
	if _, err := s.prepareControl(ctx, true); err != nil {
		return err
	}
	notify := `SELECT pg_notify($3, $4) FROM w`
	payload := notifyPayload(s.ctlKey)
	if prev == 0 {
		tag, err := s.pool.Exec(ctx, `WITH w AS (
	INSERT INTO `+s.control+` (key, record, version) VALUES ($1, $2, 1)
	ON CONFLICT (key) DO NOTHING RETURNING 1
) `+notify, s.ctlKey, string(value), s.channel, payload)
		return s.affected("write the control record", tag, err)
	}
	tag, err := s.pool.Exec(ctx, `WITH w AS (
	UPDATE `+s.control+` SET record = $2, version = version + 1
	WHERE key = $1 AND version = $5 RETURNING 1
) `+notify, s.ctlKey, string(value), s.channel, payload, int64(prev))
	return s.affected("write the control record", tag, err)
}

// The control writes notify (pg_notify, in the write's own statement, so
// the notice goes out exactly when the write commits) on one channel per
// control table, with the record's key as the payload; WaitControl
// LISTENs on it from a connection of its own (leaserow.ControlNotifier).

// DefaultControlBackstop is how long a listen waits for a notice before
// WaitControl reads the record anyway: a notice lost (the listening
// connection dropped it with the server, a write made by hand or by an
// older leaderrun, a pooler that keeps no session) is read within it.
const DefaultControlBackstop = 30 * time.Second

// Limits of PostgreSQL's NOTIFY: a channel is an identifier (at most 63
// bytes), a payload shorter than 8000 bytes.
const (
	maxChannel = 63
	maxPayload = 7999
)

// notifyChannel names the control table's channel: schema.table_control,
// or a digest of it when that is longer than an identifier may be.
func notifyChannel(schema, table string) string {
	ch := schema + "." + table + "_control"
	if len(ch) <= maxChannel {
		return ch
	}
	sum := sha256.Sum256([]byte(ch))
	return "leaderrun_control_" + hex.EncodeToString(sum[:16])
}

// notifyPayload is the notice's payload for a control key: the key, or a
// digest of it when it is too long for a payload.
func notifyPayload(key string) string {
	if len(key) <= maxPayload {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ListenControl takes a connection out of the pool for as long as the
// listen lasts and LISTENs on the control table's channel. A server or
// role that refuses LISTEN is said once, at Warn; from then on this store
// does not try again (WaitControl polls).
func (s *store) ListenControl(ctx context.Context) (leaserow.ControlListen, error) {
	s.mu.Lock()
	refused := s.listenRefused
	s.mu.Unlock()
	if refused != nil {
		return nil, refused
	}
	// Bounded like every other call, and ended by Close: a server that
	// stopped answering must not hold a connection that Close waits for.
	lctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	stop := context.AfterFunc(s.closing, cancel)
	defer stop()
	conn, err := s.pool.Acquire(lctx)
	if err != nil {
		return nil, s.classify("listen for control writes", err)
	}
	if _, err = conn.Exec(lctx, `LISTEN `+pgx.Identifier{s.channel}.Sanitize()); err != nil {
		conn.Release()
		err = s.classify("listen for control writes", err)
		if errors.Is(err, locker.ErrRefused) {
			s.mu.Lock()
			first := s.listenRefused == nil
			s.listenRefused = err
			s.mu.Unlock()
			if first {
				s.log.Warn("cannot LISTEN for control writes; reading the control record once per renew interval instead", "error", err)
			}
		}
		return nil, err
	}
	return &listen{s: s, conn: conn, payload: notifyPayload(s.ctlKey)}, nil
}

// listen is one ListenControl.
type listen struct {
	s       *store
	conn    *pgxpool.Conn
	payload string
}

// Wait waits for a notice of the key (others of the table are skipped),
// the backstop, or the store's Close. At the backstop it checks the
// connection with one empty query.
func (li *listen) Wait(ctx context.Context) error {
	wctx, cancel := context.WithTimeout(ctx, li.s.backstop)
	defer cancel()
	stop := context.AfterFunc(li.s.closing, cancel)
	defer stop()
	for {
		n, err := li.conn.Conn().WaitForNotification(wctx)
		switch {
		case err == nil:
			if n != nil && n.Payload != li.payload {
				rowWake(li.s.channel, n.Payload) // a release (wake.go), or another key's
				continue
			}
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case li.s.closing.Err() != nil:
			return errors.New("postgres: the store is closed")
		case wctx.Err() != nil && !li.conn.Conn().IsClosed():
			// The backstop. A connection cut without a word (no RST)
			// would keep a listen deaf: one empty query proves it.
			pctx, cancel := context.WithTimeout(ctx, li.s.timeout)
			err = li.conn.Ping(pctx)
			cancel()
			if err == nil {
				return nil
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
		return li.s.classify("wait for control writes", err)
	}
}

// Close UNLISTENs and gives the connection back, or closes it when it
// cannot say UNLISTEN at once.
func (li *listen) Close() {
	c := li.conn.Conn()
	if !c.IsClosed() && li.s.closing.Err() == nil {
		ctx, cancel := context.WithTimeout(context.Background(), li.s.timeout)
		if _, err := c.Exec(ctx, `UNLISTEN *`); err != nil {
			_ = c.Close(ctx)
		}
		cancel()
	}
	li.conn.Release()
}
