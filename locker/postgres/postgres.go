// Package postgres keeps leadership in a row of a PostgreSQL table: the
// lease-row core (package leaserow) on a Store of single conditional SQL
// statements, through jackc/pgx.
//
// # What PostgreSQL must give
//
// Every write is one statement conditioned on the row's version (UPDATE
// ... WHERE key = $1 AND version = $2; a holder's renewal and release on
// every column it owns, so that a hand edit that leaves the version as it
// was still ends its term), and reads go to the server that took the
// writes. That keeps the promise on one primary, and on
// synchronous replication whose failover loses no committed transaction.
// An asynchronous standby promoted after a failover can lack a committed
// acquire or renewal: two holders, and an epoch handed out twice (the
// sequence goes back too). A connection that lands on a standby
// (pg_is_in_recovery()) is refused as a configuration error.
//
// # The tables
//
// In the schema chosen (Config.Schema), Config.Table holds one row per
// key, Table_epoch is the sequence every acquire takes its epoch from (in
// the same statement: nextval survives a row deleted by hand, and never
// goes back on one server), Table_runs keeps the once-per records,
// Table_terms the history (locker.History: one row per term, the newest
// few per key), and Table_control the operator's control records
// (locker.Controls: one row per key, shared by its slot keys, with a
// version counter every write advances). They are created when missing and
// the role may; examples/postgres.sql is the same DDL for a DBA.
// Table_terms and Table_control are prepared on their own, on the first
// history or control call: an installation made before they existed keeps
// leading without them (a missing control table reads as no record; only
// writing one is refused).
//
// # Following the control record
//
// A control write NOTIFYs the control table's channel in its own
// statement; WaitControl LISTENs on one pooled connection held for the
// wait, reads the record after the LISTEN, again at each notice of its
// key, and every DefaultControlBackstop without one (control.go). A
// release notifies the same channel, and that listen wakes the candidates
// of the process that wait for the freed row (wake.go).
package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/leaserow"
	"github.com/leaderrun/leaderrun/locker/records"
)

// Defaults of Config.
const (
	DefaultSchema         = "public"
	DefaultTable          = "leaderrun_leases"
	DefaultConnectTimeout = 5 * time.Second
)

// Config configures a Locker.
type Config struct {
	locker.Options
	// DSN is a libpq connection string or URL; what it leaves out comes
	// from the libpq variables (PGHOST, PGPORT, PGUSER, PGPASSWORD,
	// PGDATABASE, PGSSLMODE, PGSSLROOTCERT, ...), ~/.pgpass and the
	// service file, as psql reads them. TLS follows sslmode.
	DSN string
	// Schema and Table name the lease table (DefaultSchema,
	// DefaultTable when empty).
	Schema, Table string
	// ConnectTimeout bounds a connection's set-up when the DSN and
	// PGCONNECT_TIMEOUT say nothing (DefaultConnectTimeout when 0), and
	// every call outside a renewal.
	ConnectTimeout time.Duration
	// ReadOnly (status, check) creates nothing: a missing table reads as
	// a key nobody holds.
	ReadOnly bool
	// Logger receives the Locker's logs; nil: none.
	Logger hclog.Logger
}

// New builds the Locker. It connects once, within the connect timeout, so
// that a server that can never do (a standby, a database that does not
// exist, credentials refused) is a configuration error of the DSN at once;
// a server it cannot reach is left to the first call, which retries.
// Every new connection checks again that the server is no standby.
func New(cfg Config) (*leaserow.Locker, error) {
	if err := locker.CheckKey(cfg.Options); err != nil {
		return nil, err
	}
	st, err := newStore(cfg)
	if err != nil {
		return nil, err
	}
	if err := st.probe(); err != nil {
		st.Close()
		return nil, err
	}
	return leaserow.New(leaserow.Config{Options: cfg.Options, Store: st, Name: "postgres",
		Timeout: st.timeout, Logger: cfg.Logger})
}

// store is one key's row in the lease table. It implements leaserow.Store.
type store struct {
	pool     *pgxpool.Pool
	key      string
	ctlKey   string // the control record's key: the key's, for a slot key too
	addr     string
	timeout  time.Duration
	readOnly bool
	log      hclog.Logger

	// Quoted names: "schema"."table", the sequence, the runs, terms and
	// control tables.
	schema, table, seq, runs, terms, control string
	schemaName, tableName                    string

	mu         sync.Mutex
	ready      bool // the tables of the lease and runs are known to exist
	termsReady bool // so is the terms table
	ctlReady   bool // so is the control table
	// ctlRefused: creating the control table was refused; reads no longer
	// try it (each try is an error in the server's log), writes do.
	ctlRefused bool
	// listenRefused: the server refused LISTEN; WaitControl polls.
	listenRefused error
	// noNotify: the server refused a release's notice for good (Clear).
	noNotify atomic.Bool

	// channel is the control table's NOTIFY channel; backstop bounds a
	// listen's wait for a notice (DefaultControlBackstop). closing ends
	// when Close begins, so that no listen keeps a connection from it.
	channel  string
	backstop time.Duration
	closing  context.Context
	close    context.CancelFunc
}

var (
	_ leaserow.Store       = (*store)(nil)
	_ leaserow.RowNotifier = (*store)(nil)
	_ leaserow.Tracer      = (*store)(nil)
)

func newStore(cfg Config) (*store, error) {
	if cfg.Schema == "" {
		cfg.Schema = DefaultSchema
	}
	if cfg.Table == "" {
		cfg.Table = DefaultTable
	}
	for field, name := range map[string]string{"Schema": cfg.Schema, "Table": cfg.Table} {
		if !validName(name) {
			return nil, &locker.ConfigError{Field: field, Rule: fmt.Sprintf("%q must be a plain SQL name: lower-case letters, digits and _, at most 50 characters", name)}
		}
	}
	pc, err := pgxpool.ParseConfig(cfg.DSN)
	if err != nil {
		return nil, &locker.ConfigError{Field: "DSN", Rule: "is not a valid PostgreSQL connection string", Err: errors.New(oneLine(err.Error()))}
	}
	cc := pc.ConnConfig
	timeout := cc.ConnectTimeout
	if timeout <= 0 {
		timeout = cfg.ConnectTimeout
		if timeout <= 0 {
			timeout = DefaultConnectTimeout
		}
		cc.ConnectTimeout = timeout
	}
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	if cc.RuntimeParams["application_name"] == "" {
		cc.RuntimeParams["application_name"] = "leaderrun"
	}
	// No named prepared statements (the unnamed one, per statement), so a
	// pooler in transaction mode works too.
	cc.DefaultQueryExecMode = pgx.QueryExecModeExec
	pc.MaxConns = 4
	pc.MinConns = 0
	pc.MaxConnIdleTime = time.Minute
	pc.HealthCheckPeriod = time.Minute
	pc.AfterConnect = checkPrimary
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		return nil, &locker.ConfigError{Field: "DSN", Rule: "cannot be used", Err: err}
	}
	key, ctlKey := cfg.Name(), cfg.Key
	if cfg.Prefix != "" {
		key, ctlKey = cfg.Prefix+"/"+key, cfg.Prefix+"/"+ctlKey
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	closing, closeFn := context.WithCancel(context.Background())
	return &store{
		channel: notifyChannel(cfg.Schema, cfg.Table), backstop: DefaultControlBackstop,
		closing: closing, close: closeFn,
		pool: pool, key: key, ctlKey: ctlKey, addr: net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))), timeout: timeout,
		readOnly: cfg.ReadOnly, log: log,
		schemaName: cfg.Schema, tableName: cfg.Table,
		schema: quote(cfg.Schema), table: quote(cfg.Schema) + "." + quote(cfg.Table),
		seq:     quote(cfg.Schema) + "." + quote(cfg.Table+"_epoch"),
		runs:    quote(cfg.Schema) + "." + quote(cfg.Table+"_runs"),
		terms:   quote(cfg.Schema) + "." + quote(cfg.Table+"_terms"),
		control: quote(cfg.Schema) + "." + quote(cfg.Table+"_control"),
	}, nil
}

// validName accepts names that need no quoting and leave room for the
// _epoch, _runs, _terms and _control suffixes within PostgreSQL's 63
// bytes.
func validName(s string) bool {
	if s == "" || len(s) > 50 || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}

func quote(name string) string { return `"` + name + `"` }

// errStandby is what checkPrimary refuses a standby server with.
var errStandby = &locker.ConfigError{Field: "DSN", Rule: "names a standby server (pg_is_in_recovery() is true): leases must be written and read on the primary"}

// checkPrimary refuses a connection to a server in recovery: a standby
// serves reads that may be behind, and takes no writes.
func checkPrimary(ctx context.Context, conn *pgx.Conn) error {
	var recovery bool
	if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&recovery); err != nil {
		return err
	}
	if recovery {
		return errStandby
	}
	return nil
}

// probe connects once; see New.
func (s *store) probe() error {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	conn, err := s.pool.Acquire(ctx)
	if err == nil {
		defer conn.Release()
		var ro string
		if s.readOnly || conn.QueryRow(ctx, "SHOW transaction_read_only").Scan(&ro) != nil || ro != "on" {
			return nil
		}
		return &locker.ConfigError{Field: "DSN", Rule: "names a read-only database (transaction_read_only is on): leases are written there"}
	}
	var ce *locker.ConfigError
	if errors.As(err, &ce) {
		return ce
	}
	if c := code(err); strings.HasPrefix(c, "28") || strings.HasPrefix(c, "3D") {
		return &locker.ConfigError{Field: "DSN", Rule: "is refused by the server", Err: errors.New(oneLine(err.Error()))}
	}
	s.log.Debug("cannot connect yet", "error", oneLine(err.Error()))
	return nil
}

// Target is the server, and the connect timeout.
func (s *store) Target() (string, time.Duration) { return s.addr, s.timeout }

// Place names the key's row: its table and the server (leaserow.Placer).
func (s *store) Place() (string, []string) {
	return "row " + s.key + " of " + s.schemaName + "." + s.tableName + " on PostgreSQL " + s.addr, []string{"DSN", "Schema", "Table"}
}

// Close ends the listens, then closes the pool, waiting at most one call
// timeout for it: a connection whose call timed out on a server that no
// longer answers is closed by pgx in the background, after a cancel
// request that may itself wait up to 15s, and the pool's Close waits for
// that. The closing goes on in the background; a leaderrun that exits
// does not wait for it.
func (s *store) Close() error {
	s.close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.pool.Close()
	}()
	t := time.NewTimer(s.timeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		s.log.Debug("closing the connections goes on in the background", "timeout_s", s.timeout.Seconds())
	}
	return nil
}

// ddl creates the lease table, its epoch sequence and the runs table
// (examples/postgres.sql is the same for the default names).
func (s *store) ddl() []string {
	return []string{
		`CREATE SCHEMA IF NOT EXISTS ` + s.schema,
		`CREATE TABLE IF NOT EXISTS ` + s.table + ` (
	key        text PRIMARY KEY,
	term       text NOT NULL,
	holder     text NOT NULL,
	contract   text NOT NULL,
	ttl_ms     bigint NOT NULL,
	epoch      bigint NOT NULL,
	version    text NOT NULL,
	renewed_at timestamptz NOT NULL
)`,
		`CREATE SEQUENCE IF NOT EXISTS ` + s.seq + ` AS bigint`,
		`CREATE TABLE IF NOT EXISTS ` + s.runs + ` (
	key     text NOT NULL,
	slot    text NOT NULL,
	record  text NOT NULL,
	at      timestamptz NOT NULL,
	expires timestamptz NOT NULL,
	PRIMARY KEY (key, slot)
)`,
	}
}

// termsDDL creates the terms table (examples/postgres.sql too).
func (s *store) termsDDL() []string {
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + s.terms + ` (
	key    text NOT NULL,
	epoch  bigint NOT NULL,
	record text NOT NULL,
	PRIMARY KEY (key, epoch)
)`,
	}
}

// prepareTerms prepares the terms table (prepareTable).
func (s *store) prepareTerms(ctx context.Context) (missing bool, err error) {
	return s.prepareTable(ctx, s.terms, "history", s.termsDDL(), &s.termsReady, nil, true)
}

// prepareTable makes sure table, one of the tables prepared on their own
// after the lease tables (terms, control), exists, once (*ready): it
// creates it with ddl when missing unless read-only. missing is true
// when it does not exist and was not created: read-only, or its creation
// refused (then with the error, naming the DDL). With refused set, a
// refusal is remembered there, and a read (!write) after it does not try
// again: each try is an error in the server's log.
func (s *store) prepareTable(ctx context.Context, table, what string, ddl []string, ready, refused *bool, write bool) (missing bool, err error) {
	if err := s.prepare(ctx); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if *ready {
		return false, nil
	}
	var got *string
	if err := s.pool.QueryRow(ctx, `SELECT to_regclass($1)::text`, table).Scan(&got); err != nil {
		return false, s.classify("read the catalog", err)
	}
	switch {
	case got != nil:
	case s.readOnly, refused != nil && *refused && !write:
		return true, nil
	default:
		if err := s.create(ctx, ddl); err != nil {
			err = s.classify("create the "+what+" table "+table, err)
			if !errors.Is(err, locker.ErrRefused) {
				return false, err
			}
			if refused != nil {
				*refused = true
			}
			return true, fmt.Errorf("%w (a DBA can run examples/postgres.sql)", err)
		}
		s.log.Info("created the "+what+" table", "table", table)
	}
	*ready = true
	return false, nil
}

// prepare makes sure the tables exist, once: it creates what is missing
// unless read-only (the schema only when it is missing too, so a role
// without CREATE on the database can still use a schema a DBA made).
func (s *store) prepare(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ready {
		return nil
	}
	missing, err := s.missing(ctx)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		if s.readOnly {
			return nil // reads then find nothing; check again next time
		}
		stmts := s.ddl()
		if !contains(missing, s.schemaName) {
			stmts = stmts[1:]
		}
		if err := s.create(ctx, stmts); err != nil {
			err = s.classify(fmt.Sprintf("create the lease tables %s (missing: %s)", s.table, strings.Join(missing, ", ")), err)
			if errors.Is(err, locker.ErrRefused) {
				err = fmt.Errorf("%w (a DBA can run examples/postgres.sql)", err)
			}
			return err
		}
		s.log.Info("created the lease table", "table", s.table)
	}
	s.ready = true
	return nil
}

// missing names the objects of ddl that do not exist.
func (s *store) missing(ctx context.Context) ([]string, error) {
	var schema bool
	var table, seq, runs *string
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1), to_regclass($2)::text, to_regclass($3)::text, to_regclass($4)::text`,
		s.schemaName, s.table, s.seq, s.runs).Scan(&schema, &table, &seq, &runs)
	if err != nil {
		return nil, s.classify("read the catalog", err)
	}
	var m []string
	if !schema {
		m = append(m, s.schemaName)
	}
	for _, o := range []struct {
		got  *string
		name string
	}{{table, s.table}, {seq, s.seq}, {runs, s.runs}} {
		if o.got == nil {
			m = append(m, o.name)
		}
	}
	return m, nil
}

// create runs stmts in one transaction; a race with another candidate
// creating the same objects is retried once.
func (s *store) create(ctx context.Context, stmts []string) error {
	var err error
	for range 2 {
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			for _, q := range stmts {
				if _, err := tx.Exec(ctx, q); err != nil {
					return err
				}
			}
			return nil
		})
		if code(err) != "23505" && code(err) != "42P07" {
			return err
		}
	}
	return err
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

const rowColumns = `term, holder, contract, ttl_ms, epoch, version, renewed_at`

// Read reads the key's row from the primary.
func (s *store) Read(ctx context.Context) (leaserow.Row, error) {
	if err := s.prepare(ctx); err != nil {
		return leaserow.Row{}, err
	}
	var r leaserow.Row
	var holder string
	var ttlMS, epoch int64
	err := s.pool.QueryRow(ctx, `SELECT `+rowColumns+` FROM `+s.table+` WHERE key = $1`, s.key).
		Scan(&r.Term, &holder, &r.Contract, &ttlMS, &epoch, &r.Version, &r.RenewedAt)
	switch {
	case errors.Is(err, pgx.ErrNoRows), s.readOnly && code(err) == "42P01":
		return leaserow.Row{}, leaserow.ErrNoRow
	case err != nil:
		return leaserow.Row{}, s.classify("read the lease row", err)
	}
	if holder != "" {
		r.Holder = locker.ParseHolder([]byte(holder))
	}
	r.HolderRecord = holder
	r.TTL = time.Duration(ttlMS) * time.Millisecond
	r.Epoch = uint64(epoch)
	return r, nil
}

// args are a row's values for the statements below: $3..$8.
func (s *store) args(r leaserow.Row) []any {
	return []any{r.Term, r.StoredHolder(), r.Contract, r.TTL.Milliseconds(), r.Version, r.RenewedAt}
}

// Create inserts the row with the next epoch, if the key has none.
func (s *store) Create(ctx context.Context, r leaserow.Row) (uint64, error) {
	if err := s.prepare(ctx); err != nil {
		return 0, err
	}
	var epoch int64
	err := s.pool.QueryRow(ctx, `INSERT INTO `+s.table+` (key, `+rowColumns+`)
VALUES ($1, $2, $3, $4, $5, nextval('`+s.seq+`'), $6, $7)
ON CONFLICT (key) DO NOTHING RETURNING epoch`, append([]any{s.key}, s.args(r)...)...).Scan(&epoch)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, leaserow.ErrConflict
	}
	if err != nil {
		return 0, s.classify("create the lease row", err)
	}
	return uint64(epoch), nil
}

// Take replaces the row at version prev, with the next epoch.
func (s *store) Take(ctx context.Context, prev string, r leaserow.Row) (uint64, error) {
	var epoch int64
	err := s.pool.QueryRow(ctx, `UPDATE `+s.table+`
SET term = $3, holder = $4, contract = $5, ttl_ms = $6, epoch = nextval('`+s.seq+`'), version = $7, renewed_at = $8
WHERE key = $1 AND version = $2 RETURNING epoch`, append([]any{s.key, prev}, s.args(r)...)...).Scan(&epoch)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, leaserow.ErrConflict
	}
	if err != nil {
		return 0, s.classify("take the lease row", err)
	}
	return uint64(epoch), nil
}

// owned is the condition that the row still holds every column of prev
// a holder owns, on $2..$7 (ownedArgs).
const owned = `version = $2 AND term = $3 AND holder = $4 AND contract = $5 AND ttl_ms = $6 AND epoch = $7`

// ownedArgs are prev's values for owned: the holder column as read, or
// as args encodes it for a row the core wrote.
func (s *store) ownedArgs(prev leaserow.Row) []any {
	a := s.args(prev)
	holder := a[1]
	if prev.HolderRecord != "" {
		holder = prev.HolderRecord
	}
	return []any{prev.Version, prev.Term, holder, prev.Contract, prev.TTL.Milliseconds(), int64(prev.Epoch)}
}

// Renew replaces the row if it is still prev, epoch unchanged.
func (s *store) Renew(ctx context.Context, prev leaserow.Row, r leaserow.Row) error {
	tag, err := s.pool.Exec(ctx, `UPDATE `+s.table+`
SET term = $8, holder = $9, contract = $10, ttl_ms = $11, version = $12, renewed_at = $13
WHERE key = $1 AND `+owned, append(append([]any{s.key}, s.ownedArgs(prev)...), s.args(r)...)...)
	return s.affected("renew the lease row", tag, err)
}

// Clear frees the row if it is still prev, marking it leaserow.Released,
// and notifies the table's channel in the same statement when it did
// (wake.go). A server that rejects
// that statement (no EXECUTE on pg_notify, a full notice queue, a server
// without NOTIFY) did none of it: the row is then freed without a notice,
// which only leaves it to the standby's next read.
func (s *store) Clear(ctx context.Context, prev leaserow.Row, next string) error {
	update := `UPDATE ` + s.table + ` SET term = '', holder = '', contract = '` + leaserow.Released + `', version = $8, renewed_at = now()
WHERE key = $1 AND ` + owned
	args := append(append([]any{s.key}, s.ownedArgs(prev)...), next)
	lasting := false
	if !s.noNotify.Load() {
		tag, err := s.pool.Exec(ctx, `WITH w AS (`+update+` RETURNING 1)
SELECT pg_notify($9, $10) FROM w`, append(args, s.channel, rowPayload(s.key))...)
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || ctx.Err() != nil {
			return s.affected("release the lease row", tag, err)
		}
		// No privilege, no such function, not supported: if the plain
		// UPDATE passes, the notice is what the server refuses, for good.
		lasting = pgErr.Code == "42501" || pgErr.Code == "42883" || pgErr.Code == "0A000"
		s.log.Debug("the server rejected the release with its notice; releasing without it", "error", err)
	}
	tag, err := s.pool.Exec(ctx, update, args...)
	if err == nil && lasting {
		s.noNotify.Store(true)
	}
	return s.affected("release the lease row", tag, err)
}

// affected turns a conditional write's outcome into the Store's errors.
func (s *store) affected(what string, tag pgconn.CommandTag, err error) error {
	if err != nil {
		return s.classify(what, err)
	}
	if tag.RowsAffected() == 0 {
		return leaserow.ErrConflict
	}
	return nil
}

// Traced reports whether the key, which has no row, shows a trace of a
// holder: a history or run record (leaserow.Tracer). The epoch sequence
// is the table's, shared by every key, so it tells nothing of one key.
// A key whose holder recorded neither (--history-keep 0, no once-per run)
// shows no trace: a deleted row is then a fresh key.
func (s *store) Traced(ctx context.Context) (bool, error) {
	if err := s.prepare(ctx); err != nil {
		return false, err
	}
	var terms *string
	if err := s.pool.QueryRow(ctx, `SELECT to_regclass($1)::text`, s.terms).Scan(&terms); err != nil {
		return false, s.classify("read the catalog", err)
	}
	q := `SELECT EXISTS (SELECT 1 FROM ` + s.runs + ` WHERE key = $1)`
	if terms != nil {
		q += ` OR EXISTS (SELECT 1 FROM ` + s.terms + ` WHERE key = $1)`
	}
	var found bool
	err := s.pool.QueryRow(ctx, q, s.key).Scan(&found)
	if s.readOnly && code(err) == "42P01" {
		return false, nil
	}
	if err != nil {
		return false, s.classify("look for a trace of the key", err)
	}
	return found, nil
}

// PutRun writes the record of run.Slot if term holds the row. The lease
// row is locked FOR SHARE in the same statement, so a takeover either
// commits first (and the condition fails) or waits for this write.
// Records of the key that expired are dropped on the way.
func (s *store) PutRun(ctx context.Context, term string, run locker.Run) error {
	if err := s.prepare(ctx); err != nil {
		return err
	}
	var n int
	err := s.pool.QueryRow(ctx, `WITH lease AS (
	SELECT 1 FROM `+s.table+` WHERE key = $1 AND term = $2 FOR SHARE
), put AS (
	INSERT INTO `+s.runs+` (key, slot, record, at, expires)
	SELECT $1, $3, $4, $5, $6 FROM lease
	ON CONFLICT (key, slot) DO UPDATE SET record = EXCLUDED.record, at = EXCLUDED.at, expires = EXCLUDED.expires
	RETURNING 1
), old AS (
	DELETE FROM `+s.runs+` WHERE key = $1 AND slot <> $3 AND expires < now() AND EXISTS (SELECT 1 FROM lease)
)
SELECT count(*) FROM put`, s.key, term, run.Slot, string(run.Record()), run.At, run.Expires).Scan(&n)
	if err != nil {
		return s.classify("record the run", err)
	}
	if n == 0 {
		return leaserow.ErrConflict
	}
	return nil
}

// ListRuns reads the key's records.
func (s *store) ListRuns(ctx context.Context) ([]records.Entry, error) {
	if err := s.prepare(ctx); err != nil {
		return nil, err
	}
	return s.entries(ctx, "list the runs", `SELECT slot, record FROM `+s.runs+` WHERE key = $1`)
}

// entries reads the key's records with q, a query of a name and a record.
func (s *store) entries(ctx context.Context, what, q string) ([]records.Entry, error) {
	rows, err := s.pool.Query(ctx, q, s.key)
	if err != nil {
		if s.readOnly && code(err) == "42P01" {
			return nil, nil
		}
		return nil, s.classify(what, err)
	}
	entries, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (records.Entry, error) {
		var name, rec string
		err := row.Scan(&name, &rec)
		return records.Entry{Name: name, Value: []byte(rec)}, err
	})
	if err != nil {
		return nil, s.classify(what, err)
	}
	return entries, nil
}

// PutTerm writes the record of term.Epoch and deletes the key's records
// beyond the newest keep, in one round trip: the two statements of a
// pipeline that ends in one Sync run as one implicit transaction.
func (s *store) PutTerm(ctx context.Context, term locker.Term, keep int) error {
	if _, err := s.prepareTerms(ctx); err != nil {
		return err
	}
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO `+s.terms+` (key, epoch, record) VALUES ($1, $2, $3)
ON CONFLICT (key, epoch) DO UPDATE SET record = EXCLUDED.record`, s.key, int64(term.Epoch), string(term.Record()))
	b.Queue(`DELETE FROM `+s.terms+` WHERE key = $1 AND epoch < (
	SELECT epoch FROM `+s.terms+` WHERE key = $1 ORDER BY epoch DESC OFFSET $2 LIMIT 1)`, s.key, keep-1)
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return s.classify("record the term", err)
	}
	return nil
}

// ListTerms reads the key's records.
func (s *store) ListTerms(ctx context.Context) ([]records.Entry, error) {
	missing, err := s.prepareTerms(ctx)
	if err != nil || missing {
		return nil, err
	}
	return s.entries(ctx, "read the history", `SELECT lpad(epoch::text, 20, '0'), record FROM `+s.terms+` WHERE key = $1`)
}

// code is the SQLSTATE of err, "" when it is not a server's error.
func code(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// refusedCodes are the SQLSTATE classes and codes retrying cannot fix.
var refusedCodes = map[string]string{
	"28":    "authentication failed",
	"3D":    "no such database",
	"42501": "permission denied",
	"42P01": "no such table",
	"3F":    "no such schema",
	"25006": "the server is read-only",
	"08P01": "protocol violation",
	"0A":    "feature not supported",
}

// classify wraps a failed call: a refusal (ErrRefused: authentication,
// permissions, a missing database or table, a read-only server, TLS, a
// standby) or a failure worth retrying, in one line.
func (s *store) classify(what string, err error) error {
	var ce *locker.ConfigError
	if errors.As(err, &ce) {
		return ce
	}
	msg := oneLine(err.Error())
	if c := code(err); c != "" {
		for _, k := range []string{c, c[:2]} {
			if why, ok := refusedCodes[k]; ok {
				return fmt.Errorf("postgres: %w: %s: %s: %s", locker.ErrRefused, what, why, msg)
			}
		}
		return fmt.Errorf("postgres: %s: %s", what, msg)
	}
	if tlsRefusal(msg) {
		return fmt.Errorf("postgres: %w: %s: %s", locker.ErrRefused, what, msg)
	}
	return fmt.Errorf("postgres: %s on %s: %s", what, s.addr, msg)
}

// tlsRefusal reports whether a connection failed on the server's TLS
// answer (sslmode asked for what it does not give, a certificate it
// refused), not on the network.
func tlsRefusal(msg string) bool {
	for _, s := range []string{"server refused TLS", "tls: ", "x509: ", "certificate"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
