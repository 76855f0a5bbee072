package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

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

// prepareControl makes sure the control table exists, once, after the
// other tables, creating it when missing unless read-only. missing is
// true when it does not exist and a read is to find no record: read-only,
// or its creation was refused before (a role that may not create tables,
// on tables a DBA made before this one existed). A write is refused then,
// in one line naming the DDL.
func (s *store) prepareControl(ctx context.Context, write bool) (missing bool, err error) {
	if err := s.prepare(ctx); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctlReady {
		return false, nil
	}
	var got *string
	if err := s.pool.QueryRow(ctx, `SELECT to_regclass($1)::text`, s.control).Scan(&got); err != nil {
		return false, s.classify("read the catalog", err)
	}
	if got != nil {
		s.ctlReady = true
		return false, nil
	}
	switch {
	case !write && (s.readOnly || s.ctlRefused):
		return true, nil
	case s.readOnly:
		return false, fmt.Errorf("postgres: %w: write the control record: no table %s, and opened read-only (a DBA can run examples/postgres.sql)", locker.ErrRefused, s.control)
	}
	if err := s.create(ctx, s.controlDDL()); err != nil {
		err = s.classify("create the control table "+s.control, err)
		if !errors.Is(err, locker.ErrRefused) {
			return false, err
		}
		s.ctlRefused = true
		if !write {
			s.log.Debug("the control table is missing and may not be created; reading no control record", "error", err)
			return true, nil
		}
		return false, fmt.Errorf("%w (a DBA can run examples/postgres.sql)", err)
	}
	s.log.Info("created the control table", "table", s.control)
	s.ctlReady = true
	return false, nil
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
// (nothing when there is one already), else replaces it at version prev.
func (s *store) WriteControl(ctx context.Context, prev uint64, value []byte) error {
	if _, err := s.prepareControl(ctx, true); err != nil {
		return err
	}
	if prev == 0 {
		tag, err := s.pool.Exec(ctx, `INSERT INTO `+s.control+` (key, record, version) VALUES ($1, $2, 1)
ON CONFLICT (key) DO NOTHING`, s.ctlKey, string(value))
		return s.affected("write the control record", tag, err)
	}
	tag, err := s.pool.Exec(ctx, `UPDATE `+s.control+` SET record = $2, version = version + 1
WHERE key = $1 AND version = $3`, s.ctlKey, string(value), int64(prev))
	return s.affected("write the control record", tag, err)
}
