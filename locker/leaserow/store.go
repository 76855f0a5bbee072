// Package leaserow is leadership kept in one row of a store that expires
// nothing by itself (a PostgreSQL table, a DynamoDB item): the shared core
// of the lease-row backends. A store supplies a strongly consistent read and
// writes conditioned on the row's version (Store); this package makes of
// them a locker.Locker whose standbys take over on their own clock
// (DESIGN §1.12, package locker/observe).
//
// # The row
//
// One row per key: the holder's term token (a random string naming one
// leadership, empty when the row is free), its holder record, the
// observer-clock contract and TTL it declares, the epoch, and a version.
// The version is a fresh random token on every write, chosen by this
// package, so a row deleted and created again never shows a version a
// standby has seen before.
//
// # The writes
//
//   - acquire: Store.Create when there is no row, else Store.Take
//     conditioned on the version last read. Both advance the store's epoch
//     counter in the same write, and the new epoch must be greater than the
//     one the row carried (else the row is given back and Acquire fails
//     with locker.ErrRefused, as a store whose counter went back cannot
//     fence).
//   - renew: Store.Renew conditioned on every field of our own last
//     write (term, holder, contract, TTL, epoch, version), so that any
//     write by someone else, a hand edit that keeps the version included,
//     makes it fail. Renew reports success only when that write
//     succeeded; the supervisor took the send time before it (DESIGN
//     §1.2). A conflict is read back: the row no longer ours is a loss;
//     the row still ours as one of our own unanswered writes left it is
//     adopted (the attempt still fails); any other row was edited by
//     hand, and that is a loss too.
//   - release: Store.Clear conditioned on every field of our own last
//     write: the row stays, with its epoch, its term and holder emptied
//     and its contract set to Released. That marker is what tells a
//     release from a hand edit.
//
// # Taking over (DESIGN §1.12, "hand edits")
//
// A standby reads the row every Config.Poll, and at once when a
// RowNotifier store hears of a release. A row its holder released
// (Released) is taken at once, as is a fresh key (no row and no trace
// that it was ever held). A row held by a holder that declares
// observe.Contract is taken once the row has stayed unchanged, every
// field of it, for the TTL that holder declared when the standby first
// saw its term (a TTL edited lower later does not count) plus
// observe.Allowance, on the standby's own monotonic clock. A row that
// disappears, or is emptied without the marker, after such a holder is a
// holder gone silent, not a free key: it is taken after the same wait,
// counted from the moment the standby first saw it so. A candidate that
// never saw the holder waits the same way on a row emptied without the
// marker, and on a missing row when the store shows the key was held
// before (Tracer), with the larger of the row's TTL and its own: it
// cannot know what the holder declared. A holder that does not declare
// the contract is never taken over, only waited for.
package leaserow

import (
	"context"
	"errors"
	"time"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/records"
)

// Sentinel errors a Store returns (wrapped or not); the core compares with
// errors.Is.
var (
	// ErrConflict: the write's condition did not hold (a row exists for
	// Create; the row is gone or its version is not the one given for
	// Take, Renew and Clear; the lease row's term is not the one given for
	// PutRun; the control record's version is not the one given for
	// WriteControl). Nothing was written.
	ErrConflict = errors.New("conditional write failed")

	// ErrNoRow: Read found no row for the key (ReadControl: no control
	// record).
	ErrNoRow = errors.New("no lease row")
)

// Row is one key's lease row as the core writes and reads it. A store
// keeps every field; how (columns, attributes, a JSON document) is its own
// affair, as long as a Read returns what the last successful write wrote.
type Row struct {
	// Term names the leadership holding the row: a random token per
	// Acquire. Empty when the row is free.
	Term string
	// Holder is who holds it, for status and check. Its Epoch field is not
	// stored: Row.Epoch is.
	Holder locker.Holder
	// Contract is observe.Contract when the holder follows the
	// observer-clock contract; a standby takes over no other holder. A
	// row its holder's release freed says Released.
	Contract string
	// TTL is the holder's TTL: a standby waits TTL + observe.Allowance(TTL)
	// of an unchanged version before it takes over.
	TTL time.Duration
	// Epoch is the fencing token of the holder's leadership. The store
	// sets it on Create and Take (see there) and keeps it otherwise.
	Epoch uint64
	// Version changes with every write: the core sets a fresh random token
	// in each row it writes, and conditions its writes on the one it read.
	Version string
	// RenewedAt is the writer's wall clock at the write. Only a hint:
	// it decides nothing.
	RenewedAt time.Time
	// HolderRecord is the holder as the store holds it, set by Read. A
	// write conditioned on a row read compares it with what the store
	// holds; on a row the core built it is empty, and the store compares
	// its own encoding of Holder, the one it wrote.
	HolderRecord string
}

// Released is the Contract of a row its holder's release freed (Clear):
// a standby takes it at once. A row freed any other way (emptied or
// deleted by hand, or released by a leaderrun older than the marker) is
// waited out for a TTL.
const Released = "released"

// released reports whether r is a row its holder's release freed.
func released(r Row) bool { return r.Term == "" && r.Contract == Released }

// Store is one key's lease row in a store, plus the key's once-per run
// records, its history and its control record. Each method is one round trip bounded by ctx, and each write is
// one conditional write: it happens whole or not at all, and when its
// condition fails it returns an error wrapping ErrConflict. An error
// wrapping locker.ErrRefused means retrying cannot help (denied, no such
// table, a read-only server); any other error is worth retrying, and a
// write that failed so may still have happened.
type Store interface {
	// Read returns the key's row with a strongly consistent read (one
	// that sees every write acknowledged before it was sent), or an error
	// wrapping ErrNoRow.
	Read(ctx context.Context) (Row, error)

	// Create writes row as the key's row if the key has none, with an
	// epoch from the store's counter advanced in the same write: greater
	// than every epoch the store handed out for the key before, also when
	// the row was deleted in between. It returns that epoch.
	Create(ctx context.Context, row Row) (epoch uint64, err error)

	// Take replaces the key's row with row if the row's version is prev,
	// advancing the epoch as Create does, and returns the new epoch.
	Take(ctx context.Context, prev string, row Row) (epoch uint64, err error)

	// Renew replaces the key's row with row if the row still holds
	// every field of prev the holder owns: Term, the holder record,
	// Contract, TTL, Epoch and Version (a hand edit that keeps the
	// version fails it too). The epoch stays what it was.
	Renew(ctx context.Context, prev Row, row Row) error

	// Clear frees the key's row if it still holds every field of prev
	// the holder owns (as Renew): Term and Holder emptied, Contract set
	// to Released, Version set to next, Epoch and TTL kept.
	Clear(ctx context.Context, prev Row, next string) error

	// PutRun writes run as the record of run.Slot for the key, replacing
	// any older record of the slot, if the key's lease row is held by term
	// (checked in the same write, so that no takeover comes between). It
	// drops records of the key that expired. The record must survive a
	// restart of the store.
	PutRun(ctx context.Context, term string, run locker.Run) error

	// ListRuns reads the key's run records, named by their slots, with a
	// strongly consistent read (expired ones may be among them).
	ListRuns(ctx context.Context) ([]records.Entry, error)

	// PutTerm writes term as the key's history record of term.Epoch,
	// replacing one already there, and deletes the key's records beyond
	// the newest keep (by epoch; keep > 0). It is conditioned on nothing:
	// a term's record is written after its release too (locker.History).
	// The record must survive a restart of the store.
	PutTerm(ctx context.Context, term locker.Term, keep int) error

	// ListTerms reads the key's history records, named by
	// locker.TermName of their epochs, with a strongly consistent read.
	ListTerms(ctx context.Context) ([]records.Entry, error)

	// ReadControl reads the key's control record (locker.Controls): the
	// value last written and its version, with a strongly consistent read,
	// or an error wrapping ErrNoRow when the key has none. The record is
	// the key's, shared by its slot keys (locker.Options.Key), and lives
	// where no lease row, run or history record can be.
	ReadControl(ctx context.Context) (value []byte, version uint64, err error)

	// WriteControl replaces the key's control record with value, at
	// version prev+1, if its version is prev (0: if the key has none). It
	// touches no lease row.
	WriteControl(ctx context.Context, prev uint64, value []byte) error

	// Target names what the store talks to, for a single attempt's error
	// line, and how long one call may take (locker.Targeter).
	Target() (addr string, timeout time.Duration)

	// Close frees the store's client.
	Close() error
}

// RowNotifier is a Store that may hear, while a candidate waits, that the
// key's row was freed (PostgreSQL: a NOTIFY in the release's statement).
// A notice only brings the waiting candidate's next read forward: the
// poll stays, for notices that are lost.
type RowNotifier interface {
	// RowChanges returns a channel closed at the next notice of a release
	// of the key's row heard after the call; nil when none can come.
	RowChanges() <-chan struct{}
}

// Tracer is a Store that can tell whether a key without a row was held
// before (a hand delete): the epoch counter of the key, its history or
// its run records. Without it, a key without a row is a fresh key.
type Tracer interface {
	// Traced reports whether the key shows any trace of a holder.
	Traced(ctx context.Context) (bool, error)
}

// Placer is a Store that names where a key's row lives, for Leader's
// answer on a key that was never used (locker.NeverUsedError): the place
// in the store's own terms and the Config fields that choose it.
type Placer interface {
	Place() (where string, fields []string)
}
