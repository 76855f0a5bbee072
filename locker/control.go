package locker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// ErrConflict is returned (wrapped) by Controls.SetControl when the control
// record changed since it was read: read it again and retry.
var ErrConflict = errors.New("the control record changed since it was read")

// Control is the operator's say over a key (DESIGN §1.16): a pause, and a
// step-down asked of one term. One record per key, shared by all its slots
// (--holders), kept on the backend next to the key, written by `leaderrun
// step-down`, `pause` and `resume` and by candidates that preempt with
// --priority. It never grants leadership: a holder that reads it only gives
// up, through its usual stop and release, and a candidate that reads it
// only holds back.
type Control struct {
	// Pause, when set, stops the key's job everywhere: its leaders stop
	// and release, and no candidate campaigns until it is cleared.
	Pause *Pause `json:"pause,omitempty"`
	// StepDown, when set, asks the term StepDown.Epoch of StepDown.Key to
	// hand over.
	StepDown *StepDown `json:"step_down,omitempty"`
	// Holders is how many slots (--holders) a candidate of the key may
	// hold at most, as far as candidates have said so: a candidate raises
	// it to its own N after it won a slot, and one that found no slot at
	// or above its N held lowers it again (DESIGN §1.15). It bounds the
	// slots a candidate reads to find holders of another N; 0 means 1.
	// It holds nobody back.
	Holders int `json:"holders,omitempty"`
	// Version is the backend's version of the record as it was read, an
	// opaque token compared for equality only; empty when the key has no
	// record. It is not part of the stored value.
	Version string `json:"-"`
}

// Pause says who paused a key, when and why.
type Pause struct {
	// By is user@host of who paused.
	By     string    `json:"by"`
	Since  time.Time `json:"since"`
	Reason string    `json:"reason"`
}

// StepDown asks one term of one slot key to hand over.
type StepDown struct {
	// Key is the name the term holds: the key, or one of its slot keys.
	Key string `json:"key"`
	// Epoch is the term asked to step down. Only that term does: a request
	// read late by a later term of the key is stale and changes nothing.
	Epoch uint64 `json:"epoch"`
	// To, when set, is the only candidate (by --id) that may take Key next,
	// until Until. Empty: any candidate but the one stepping down.
	To string `json:"to,omitempty"`
	// By is user@host of who asked, or "priority" for a preemption.
	By string    `json:"by"`
	At time.Time `json:"at"`
	// Until ends the request: after it, every candidate may campaign for
	// Key again, the one that stepped down included. At most
	// MaxReservation after At; one further from a reader's now than
	// MaxReservation and ReservationSkew is Void.
	Until time.Time `json:"until"`
	// Taken is the epoch of the term that took Key after the step-down,
	// written by that term's holder; from then on the request holds
	// nobody back.
	Taken uint64 `json:"taken,omitempty"`
}

// Controls is the control seam: the key's control record on the backend.
// A backend's Locker implements it next to Locker; find it with
// As[Controls]. Every implementation must pass
// locker/lockertest.ControlContract. Reading and writing it needs the
// credentials leaderrun campaigns with, and no lease.
type Controls interface {
	// Control reads the key's control record with a linearizable read; a
	// key without one gives the zero Control (Version empty).
	Control(ctx context.Context) (Control, error)

	// SetControl replaces the key's control record with c, as one write
	// conditioned on the record's version still being c.Version (empty:
	// there is no record yet). When another write came first nothing is
	// written and the error wraps ErrConflict. A record with neither Pause
	// nor StepDown is still written (it keeps the version moving); it
	// returns the version written.
	SetControl(ctx context.Context, c Control) (version string, err error)

	// WaitControl returns the control record once its version differs from
	// version (at once if it already does), or ctx.Err() when ctx ends
	// first. A backend with a watch (etcd, Consul, ZooKeeper, Kubernetes)
	// or a notice (PostgreSQL's LISTEN, with a slow backstop read) holds
	// one open; the others read again at a pace of their own, ControlPoll
	// or sooner.
	WaitControl(ctx context.Context, version string) (Control, error)
}

// ControlPoll is the longest a backend without a watch waits between two
// reads of the control record in WaitControl: a step-down or pause reaches
// its holder within it.
const ControlPoll = time.Second

// ControlsOf returns the Controls of a backend, looking through wrappers.
func ControlsOf(l Locker) (Controls, bool) { return As[Controls](l) }

// Record encodes the control record as the value stored on the backend.
func (c Control) Record() []byte { return Encode(c, "control record") }

// ParseControl decodes a value written by Record, with the backend's
// version of it. An empty value is an empty record.
func ParseControl(value []byte, version string) (Control, error) {
	var c Control
	if len(value) > 0 {
		if err := json.Unmarshal(value, &c); err != nil {
			return Control{}, &BadControlError{Version: version, Value: value}
		}
	}
	c.Version = version
	return c, nil
}

// BadControlError is a control record that does not parse (written by
// hand, or by something else). Version is the backend's version of it, so
// that `leaderrun resume`, `pause` or `step-down` can replace it with a
// conditional write like any other.
type BadControlError struct {
	Version string
	Value   []byte
}

func (e *BadControlError) Error() string {
	return fmt.Sprintf("not a control record: %q", e.Value)
}

// MaxReservation bounds a step-down: no leaderrun writes one whose Until
// lies more than this after its At (`step-down --timeout` refuses more,
// a preemption's window is cut to it). A step-down is a handover, over
// within a few TTLs; a key kept from every candidate for longer is what
// pause is for, and status shows a pause.
const MaxReservation = time.Hour

// ReservationSkew is how far ahead of a candidate's clock the clock of the
// host that wrote a step-down may run before the candidate takes the
// step-down's Until for one no leaderrun wrote (DESIGN §1.16).
const ReservationSkew = 5 * time.Minute

// Void reports whether the step-down ends further from now than any
// leaderrun writes one: its Until is more than MaxReservation plus
// ReservationSkew ahead of now (on the reader's clock). Such a request was
// written by hand, by something else, or by a clock far ahead; it asks
// nobody to step down and holds nobody back, so that a record saying
// "until 9999" cannot keep a key from every candidate.
func (sd *StepDown) Void(now time.Time) bool {
	return sd.Until.After(now.Add(MaxReservation + ReservationSkew))
}

// Pending reports whether the step-down is under way at now: no later
// term took the key, its Until has not passed, and it is not Void.
func (sd *StepDown) Pending(now time.Time) bool {
	return sd != nil && sd.Taken == 0 && now.Before(sd.Until) && !sd.Void(now)
}

// Reserves reports whether the step-down still stands on the record at
// now, void or not: what `resume` clears and status shows.
func (sd *StepDown) Reserves(now time.Time) bool {
	return sd != nil && sd.Taken == 0 && now.Before(sd.Until)
}

// Paused reports whether the record pauses the key.
func (c Control) Paused() bool { return c.Pause != nil }

// Holds reports whether the record holds candidate id back from
// campaigning for name at now: the key is paused, or a step-down of name
// that no later term has taken yet, before its Until, reserves it for
// another candidate (To) or keeps out the holder that stepped down
// (steppedDown: the epoch id held name with when it stepped down; 0 for
// none). A Void step-down holds nobody back.
func (c Control) Holds(name, id string, steppedDown uint64, now time.Time) bool {
	if c.Pause != nil {
		return true
	}
	sd := c.StepDown
	if sd == nil || sd.Key != name || !sd.Pending(now) {
		return false
	}
	if sd.To != "" {
		return sd.To != id
	}
	return steppedDown != 0 && steppedDown == sd.Epoch
}

// AsksToStepDown reports whether the record asks the term epoch of name
// to stop at now: a pause, or a step-down of exactly that term whose Until
// has not passed and that is not Void.
func (c Control) AsksToStepDown(name string, epoch uint64, now time.Time) (why string, ok bool) {
	if c.Pause != nil {
		return fmt.Sprintf("paused by %s: %s", c.Pause.By, c.Pause.Reason), true
	}
	if sd := c.StepDown; sd != nil && sd.Key == name && sd.Epoch == epoch && sd.Pending(now) {
		if sd.To != "" {
			return fmt.Sprintf("step-down to %s asked by %s", sd.To, sd.By), true
		}
		return "step-down asked by " + sd.By, true
	}
	return "", false
}
