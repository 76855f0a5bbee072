// Package locker defines the seam between the supervisor and the backends
// that hold leadership of a key (Consul, etcd, ZooKeeper, a Kubernetes
// Lease, a PostgreSQL row, a DynamoDB item, a local lock file).
//
// A backend knows how to win a key, how to make one renewal round trip, how to
// notice that leadership is gone, and how to give it back. It never keeps
// time and never touches the child: the renewal loop, the send timestamps,
// the deadline and the stop timeline all live in package supervise
// (DESIGN §1.2-1.4, §6).
package locker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Sentinel errors shared by every backend. Callers compare with errors.Is.
var (
	// ErrHeld is returned by Acquire with Options.NoWait when another holder
	// leads the key.
	ErrHeld = errors.New("key is held by another holder")

	// ErrLost means leadership is definitely gone: the lease or session
	// expired or was revoked, or our key was deleted or taken over. Renew
	// returns it (wrapped) when the backend says so; the supervisor then
	// starts the stop sequence at once (DESIGN §1.3).
	ErrLost = errors.New("leadership lost")

	// ErrRefused means the backend refused us for a reason that retrying will
	// not fix: ACL or authentication denied, TLS failure, bad configuration.
	// leaderrun exits 125 on it instead of retrying.
	ErrRefused = errors.New("backend refused the request")

	// ErrNoLeader is returned by Leader when nobody holds the key.
	ErrNoLeader = errors.New("no leader")

	// ErrNeverUsed is returned by Leader, always together with ErrNoLeader
	// (a *NeverUsedError), when the backend finds no trace that the key
	// was ever campaigned for where it looked: a typo in the key, or the
	// wrong server, prefix or lock directory, rather than a key whose
	// holder has let go.
	ErrNeverUsed = errors.New("key never used")
)

// NeverUsedError is how Leader says that nobody holds the key and nothing
// shows it ever was: each backend decides what counts as a trace (a record
// it leaves behind after a release, an epoch counter, run records). It
// matches both ErrNoLeader and ErrNeverUsed, so a caller that only asks
// "is there a leader?" needs no change.
type NeverUsedError struct {
	Key string
	// Where names the place the backend looked, in its own terms:
	// "/run/leaderrun (local lock dir)", "/leaderrun/billing/ on etcd
	// 10.0.0.1:2379".
	Where string
	// Fields are the settings that choose that place, as Config field
	// names (like ConfigError.Field), for the caller to word as the
	// options an operator typed.
	Fields []string
}

// Error says that the key was never used and where the backend looked.
func (e *NeverUsedError) Error() string {
	return fmt.Sprintf("key %q was never used at %s", e.Key, e.Where)
}

// Unwrap lets errors.Is find both ErrNoLeader and ErrNeverUsed.
func (e *NeverUsedError) Unwrap() []error { return []error{ErrNoLeader, ErrNeverUsed} }

// Locker campaigns for one key on one backend.
type Locker interface {
	// Acquire blocks until this candidate leads the key and returns its
	// Lease. While waiting it keeps its own candidacy alive. It returns
	// ctx.Err() when ctx ends, ErrHeld (wrapped) when Options.NoWait is set
	// and someone else leads, an error wrapping ErrRefused when retrying is
	// pointless, and any other error for a failure worth retrying (the
	// supervisor retries with backoff). A returned Lease has been verified
	// to exist on the backend (DESIGN §1.7); its epoch is final.
	Acquire(ctx context.Context) (Lease, error)

	// Leader reads the current holder of the key with a linearizable read.
	// It returns ErrNoLeader (wrapped) when nobody holds the key, and a
	// *NeverUsedError (which wraps ErrNoLeader too) when nothing on the
	// backend shows that the key was ever used.
	Leader(ctx context.Context) (Holder, error)

	// ReleaseHandle gives up a lease that another process acquired,
	// identified by the string its Lease.Handle returned, as Lease.Release
	// would. The dead-man guard calls it after leaderrun itself died, and
	// only once it has seen the child's whole process group gone (DESIGN
	// §1.4), so the standby can take over at once instead of after the TTL.
	// Releasing a lease that is already gone is not an error.
	ReleaseHandle(ctx context.Context, handle string) error

	// Close frees the backend client. It does not release a held lease.
	Close() error
}

// Confirmed is implemented by a Lease whose Acquire ended with a renewal
// made after its wait, beside its last check, and answered. That renewal's
// send time and grant stand for the supervisor's confirm, which then makes
// no round trip of its own (DESIGN §1.2): the deadline counts from a send
// made after the wait, as the confirm's would. ok is false after the first
// call, and where Acquire made no such renewal.
type Confirmed interface {
	Confirmation() (sent time.Time, granted time.Duration, ok bool)
}

// ControlAtWin is implemented by a Lease whose Acquire read the key's
// control record (the one its Locker's Controls read) in the same
// linearizable step that found the key won: the supervisor's read after
// the win (DESIGN §1.16) is then that one, with no round trip of its own.
// ok is false after the first call, and where Acquire read none.
type ControlAtWin interface {
	ControlAtWin() (c Control, ok bool, err error)
}

// Lease is one leadership: it exists from a successful Acquire until Release
// or until it is lost. It is not safe for concurrent Renew calls.
type Lease interface {
	// Epoch is the fencing token of this leadership: strictly greater than
	// every epoch granted before for this key on this backend (DESIGN §1.1).
	Epoch() uint64

	// Renew makes exactly one renewal round trip and returns the TTL the
	// backend granted. The caller takes the send time before calling and
	// computes the deadline itself; a backend must never report a TTL it did
	// not get. ctx carries the per-call timeout (DESIGN §1.8). An error
	// wrapping ErrLost means the lease is gone for good; any other error is a
	// failed attempt that may be retried until the deadline.
	Renew(ctx context.Context) (granted time.Duration, err error)

	// Lost is closed when the backend observes, without being asked, that
	// leadership is gone (key deleted, session invalidated, lease revoked,
	// key taken over). It never reopens.
	Lost() <-chan struct{}

	// LostReason says why Lost was closed; empty while it is open.
	LostReason() string

	// Handle is an opaque string from which ReleaseHandle, in another
	// process with the same backend options, can release this lease.
	Handle() string

	// Release gives leadership back: delete our key, revoke the lease or
	// destroy the session. The supervisor calls it only after the child's
	// whole process group is gone (DESIGN §1.4). It also stops any
	// goroutine the lease started, even when the backend cannot be reached.
	Release(ctx context.Context) error
}

// Holder describes who leads a key, as read by Leader.
type Holder struct {
	ID         string    `json:"id"`
	Hostname   string    `json:"hostname"`
	PID        int       `json:"pid"`
	Epoch      uint64    `json:"epoch"`
	AcquiredAt time.Time `json:"acquired_at"`
	Version    string    `json:"version,omitempty"`
	// Holders is how many slots the holder's key has (its --holders);
	// 0 in a record written without one, which means 1.
	Holders int `json:"holders,omitempty"`
	// Priority is the holder's --priority (0 when unset): a waiting
	// candidate of a higher one may ask it to hand over (DESIGN §1.16).
	Priority int `json:"priority,omitempty"`
	// LeaseRemaining is how long the backend will keep the lease without a
	// renewal, where the backend can tell (etcd: the lease's TimeToLive;
	// Consul: the session TTL); zero when unknown.
	LeaseRemaining time.Duration `json:"-"`
}

// Options are the settings every backend shares.
type Options struct {
	// Key names the leadership: the key an operator typed
	// (ValidateUserKey), never one of its slot keys. Its shared records
	// (the control record) are named by it.
	Key string
	// Slot is the slot of Key this Locker campaigns for: 0 is the key
	// itself, s > 0 is held under SlotKey(Key, s) (see Name). Left out of
	// JSON when 0: the guard's hello names a slot by its name in Key.
	Slot int `json:",omitempty"`
	// Prefix namespaces leaderrun's keys on the backend.
	Prefix string
	// ID names this candidate in logs and in the holder record.
	ID string
	// TTL is the lease time requested from the backend.
	TTL time.Duration
	// NoWait makes Acquire try once and return ErrHeld instead of waiting.
	NoWait bool
	// Version is leaderrun's version, recorded in the holder record.
	Version string
	// Holders is the --holders of the candidate (0 or 1: one holder),
	// recorded in the holder record so that candidates asking for
	// another number of slots can be refused (DESIGN §1.15).
	Holders int
	// Priority is the --priority of the candidate, recorded in the holder
	// record for candidates of a higher one to read (DESIGN §1.16).
	Priority int
}

// Name is the name the backend holds: the key itself for slot 0, the
// slot key SlotKey(Key, Slot) for another slot. Backends name the lock,
// lease, row or node, and the records filed with it, by Name; the
// records the key's slots share, by Key.
func (o Options) Name() string { return SlotKey(o.Key, o.Slot) }

// ValidateName checks Key (ValidateUserKey) and Slot (0 to
// MaxHolders-1): the name a Locker of o holds.
func (o Options) ValidateName() error {
	if err := ValidateUserKey(o.Key); err != nil {
		return err
	}
	if o.Slot < 0 || o.Slot >= MaxHolders {
		return fmt.Errorf("slot %d of %q must be from 0 to %d", o.Slot, o.Key, MaxHolders-1)
	}
	return nil
}

// simpleName reports whether s is 1 to 128 characters: a letter or digit,
// then letters, digits and the characters of also. It stands for the
// pattern [A-Za-z0-9][A-Za-z0-9<also>]{0,127}, without the compiled
// expression that every process would build at start and keep.
func simpleName(s, also string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if !alnum && (i == 0 || strings.IndexByte(also, c) < 0) {
			return false
		}
	}
	return true
}

// MaxHolders bounds --holders: the number of slots of one key.
const MaxHolders = 64

// slotSep joins a key and a slot number in a slot key. It never occurs in
// a key typed by an operator (ValidateUserKey), so no slot key is ever
// another key's name; every backend's name mapping takes it as is (the
// Kubernetes Lease name escapes it like any other character).
const slotSep = "~"

// SlotKey is the key that slot s (0 <= s < MaxHolders) of key holds: slot
// 0 is the key itself, so --holders 1 keeps today's names, and slot s > 0
// is "key~s". Each slot is a leadership of its own.
func SlotKey(key string, slot int) string {
	if slot == 0 {
		return key
	}
	return key + slotSep + strconv.Itoa(slot)
}

// SplitSlotKey undoes SlotKey: the key and the slot a name stands for.
// ok is false for a name that SlotKey cannot have produced.
func SplitSlotKey(name string) (key string, slot int, ok bool) {
	i := strings.LastIndex(name, slotSep)
	if i < 0 {
		return name, 0, ValidateUserKey(name) == nil
	}
	key, num := name[:i], name[i+1:]
	n, err := strconv.Atoi(num)
	if err != nil || n < 1 || n >= MaxHolders || strconv.Itoa(n) != num || ValidateUserKey(key) != nil {
		return "", 0, false
	}
	return key, n, true
}

// ValidateKey checks the name a backend holds: a key (ValidateUserKey) or
// one of its slot keys (SlotKey).
func ValidateKey(key string) error {
	if strings.Contains(key, slotSep) {
		if _, _, ok := SplitSlotKey(key); !ok {
			return fmt.Errorf("%q must be a key, or a key followed by ~ and a slot from 1 to %d", key, MaxHolders-1)
		}
		return nil
	}
	return ValidateUserKey(key)
}

// ValidateUserKey checks a key against DESIGN §2: it starts with a letter
// or digit, uses only letters, digits and . _ / -, is at most 128
// characters and never contains "..", so it is safe both as a backend path
// and a file name.
func ValidateUserKey(key string) error {
	if key == "" {
		return errors.New("must not be empty")
	}
	if !simpleName(key, "._/-") {
		return fmt.Errorf("%q must match [A-Za-z0-9][A-Za-z0-9._/-]{0,127}", key)
	}
	if strings.Contains(key, "..") {
		return fmt.Errorf("%q must not contain \"..\"", key)
	}
	if strings.HasSuffix(key, "/") || strings.Contains(key, "//") {
		return fmt.Errorf("%q must not end in / or contain //", key)
	}
	return nil
}

// ValidatePrefix checks a key prefix with the same rules as a key.
func ValidatePrefix(prefix string) error {
	return ValidateUserKey(prefix)
}

// CheckKey is the ConfigError (Field "Key" or "Prefix") of the key and
// slot of o (Options.ValidateName) or its prefix, when one is given
// (ValidatePrefix), that is not valid; nil when both are.
func CheckKey(o Options) error {
	prefix := o.Prefix
	if err := o.ValidateName(); err != nil {
		return &ConfigError{Field: "Key", Rule: "is not a valid key", Err: err}
	}
	if err := ValidatePrefix(prefix); prefix != "" && err != nil {
		return &ConfigError{Field: "Prefix", Rule: "is not a valid prefix", Err: err}
	}
	return nil
}
