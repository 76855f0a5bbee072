// Package queue is the candidates' queue of the backends whose standbys
// would otherwise all follow the key, Consul and Kubernetes (DESIGN
// §1.12, "Who wakes at a failover", says the rules and why), written once
// over a Store each backend implements on its own server, with a Clock a
// test may replace. Only the head (no live entry ahead of its own) follows
// the key; every other candidate follows the entry just ahead and moves
// up when it is deleted, ended by the backend, or silent: unchanged on our
// clock for its silence bound (Config.Silence) while it declares a place
// near the head, or deeper where the backend says so. Entries frozen
// together are passed over together; without sessions an entry the
// server last wrote long before the queue's newest write is skipped at
// once (ancient); the one candidate that moves past dead entries deletes
// them; a candidate whose entry went writes it again at the tail. The
// queue decides only who tries first, never who leads.
package queue

import (
	"cmp"
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/leaderrun/leaderrun/internal/retry"
	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/observe"
)

// Entry is one candidate's entry as the backend read it.
type Entry struct {
	Key     string // names it: in logs, and to the backend
	Version string // changes with every write
	// Rank orders the queue (lower first, then Key): what the server gave
	// the entry at its creation. An entry that never got its rank has
	// Placed false and the largest Rank: it stands behind every other.
	Rank   uint64
	Placed bool
	// Said is what the entry declares of its place ("0", "1", "?", or
	// anything else, read as "?"); Unsaid marks an entry that declares
	// nothing, an older leaderrun's, taken to rewrite as one near the
	// head does.
	Said   string
	Unsaid bool
	// Ended: the backend ended the entry (Consul: its session is gone and
	// it is unlocked); dead at once.
	Ended bool
	// Written is when the server last wrote it, by the server's clock
	// (zero when it keeps no such time); Stamp the time its writer put in
	// it, by the writer's clock (zero when none). Only the ancient rule
	// reads them.
	Written, Stamp time.Time
	// Ref is the backend's own record of the entry.
	Ref any
}

// Store is what the core needs of a backend's queue.
type Store interface {
	// List reads the queue: the candidate's own entry, nil when it is gone
	// or no longer stands as the candidate wrote it, and every other.
	List(ctx context.Context) (mine *Entry, others []Entry, err error)
	// Rejoin writes the candidate's entry afresh, at the tail.
	Rejoin(ctx context.Context) error
	// Declare writes the candidate's entry again, saying that ahead live
	// entries are known ahead of it (Said), and returns what the write
	// said (Unknown for an entry it had to create afresh).
	Declare(ctx context.Context, ahead int64) (said int64, err error)
	// Delete deletes e if it is still as read; an entry already gone is
	// no error.
	Delete(ctx context.Context, e Entry) error
	// Follow starts following e, the entry ahead.
	Follow(ctx context.Context, e Entry) (Follower, error)
	// Retryable reports whether a failed call may succeed when made again:
	// not a refusal.
	Retryable(err error) bool
}

// Follower follows one entry.
type Follower interface {
	// Next waits up to wait (Forever: as long as the backend likes) for
	// the entry to change, and returns it as it is then (unchanged when
	// nothing happened), or gone when it was deleted or ended.
	Next(ctx context.Context, wait time.Duration) (e Entry, gone bool, err error)
	Stop()
}

// Forever is a wait without a bound of the core's.
const Forever time.Duration = -1

// Clock is the time the core's rules run on: the real one unless a test
// injects its own.
type Clock = retry.Clock

// Config is a backend's queue.
type Config struct {
	// TTL is the candidates' TTL: the silence bound of entries near the
	// head.
	TTL time.Duration
	// DeepTTL is the silence bound of deeper entries; zero when the
	// backend ends a dead candidate's entry itself, so that silence says
	// nothing of a deep one.
	DeepTTL time.Duration
	// Ancient turns on the ancient rule (backends without sessions).
	Ancient bool
	// Clock is nil for the real one.
	Clock Clock
	// Log names the key in every line; ErrText is how an error is logged
	// (nil: as it is).
	Log     hclog.Logger
	ErrText func(error) any
}

// Said is what a write declares for n live entries known ahead.
func Said(n int64) string {
	if n <= 1 {
		return strconv.FormatInt(n, 10)
	}
	return "?"
}

// Mode reads what e declares: whether its writer rewrites it as a
// candidate near the head does, and whether it is the head.
func Mode(e Entry) (near, head bool) {
	switch {
	case e.Unsaid || e.Said == "1":
		return true, false
	case e.Said == "0":
		return true, true
	}
	return false, false
}

// Silence is the TTL e's successor observes it with: it skips e once
// unchanged for Silence + observe.Allowance(Silence). judged is false
// for a deep entry on a backend that ends dead entries itself.
func (c Config) Silence(e Entry) (d time.Duration, judged bool) {
	if near, _ := Mode(e); near {
		return c.TTL, true
	}
	return c.DeepTTL, c.DeepTTL > 0
}

// DeepBound is how long a killed or frozen deep candidate holds up the
// queue where silence judges it.
func (c Config) DeepBound() time.Duration { return c.DeepTTL + observe.Allowance(c.DeepTTL) }

// AncientAfter is how long e must have gone unwritten for the ancient
// rule to skip it: three times its silence bound.
func (c Config) AncientAfter(e Entry) time.Duration {
	d, _ := c.Silence(e)
	return 3 * (d + observe.Allowance(d))
}

// RetryFor bounds a run of failing queue calls: three times what a silent
// entry holds up its successor, and at least 30s.
func RetryFor(ttl time.Duration) time.Duration {
	return max(30*time.Second, 3*(ttl+observe.Allowance(ttl)))
}

// Queue is one waiting candidate's part in its key's queue.
type Queue struct {
	cfg   Config
	store Store
	place *Place
}

// New returns the candidate's queue; place is what it knows of its place,
// which its backend's renewals of the entry read too.
func New(cfg Config, store Store, place *Place) *Queue {
	if cfg.Clock == nil {
		cfg.Clock = retry.RealClock{}
	}
	if cfg.Log == nil {
		cfg.Log = hclog.NewNullLogger()
	}
	if cfg.ErrText == nil {
		cfg.ErrText = func(err error) any { return err }
	}
	return &Queue{cfg: cfg, store: store, place: place}
}

// Join makes the candidate's first entry with enqueue. A failure that may
// pass (retryable) is retried with a doubling pause while the run of
// failures fits (Queue.again) and, when within is not zero, less than
// within has gone. A refusal, or a failure that lasts, is returned, and
// the candidate campaigns without the queue, which costs fairness and
// requests, never safety.
func Join(ctx context.Context, cfg Config, retryable func(error) bool, within time.Duration, enqueue func(context.Context) error) error {
	q := New(cfg, nil, nil)
	backoff := retry.Backoff{Min: 100 * time.Millisecond, Max: 2 * time.Second}
	began := q.cfg.Clock.Now()
	var failing run
	for {
		err := enqueue(ctx)
		if err == nil || ctx.Err() != nil || !retryable(err) || !q.again(ctx, &failing) ||
			within > 0 && q.cfg.Clock.Now().Sub(began) >= within {
			return err
		}
		q.debug("cannot join the candidates' queue yet; retrying", err)
		if !q.cfg.Clock.Sleep(ctx, backoff.Next()) {
			return ctx.Err()
		}
	}
}

func (q *Queue) debug(msg string, err error, args ...any) {
	if err != nil {
		args = append(args, "error", q.cfg.ErrText(err))
	}
	q.cfg.Log.Debug(msg, args...)
}

// run measures a run of failed queue calls on the core's clock.
type run struct{ began time.Time }

// again records a failure in r and reports whether the run is within
// RetryFor and half of what ctx has left, so that a free key is still
// taken in the other half.
func (q *Queue) again(ctx context.Context, r *run) bool {
	now := q.cfg.Clock.Now()
	if r.began.IsZero() {
		r.began = now
	}
	lasted := now.Sub(r.began)
	if dl, ok := ctx.Deadline(); ok && lasted >= time.Until(dl) {
		return false
	}
	return lasted < RetryFor(q.cfg.TTL)
}

// declare writes the candidate's entry at once when its place near the
// head is news to it, so that its successor judges it by the near rule
// (and the one after learns its own place) without waiting for the next
// renewal: a candidate frozen a moment after it became head, or right
// behind it, is passed over after TTL + allowance.
func (q *Queue) declare(ctx context.Context) {
	ahead, news := q.place.News()
	if !news {
		return
	}
	said, err := q.store.Declare(ctx, ahead)
	if err != nil {
		if ctx.Err() == nil {
			q.debug("writing the queue entry's place failed; writing it with the next renewal", err)
		}
		return
	}
	q.place.Said(said)
}

// before reports whether a stands ahead of b.
func before(a, b *Entry) bool {
	return cmp.Or(cmp.Compare(a.Rank, b.Rank), strings.Compare(a.Key, b.Key)) < 0
}

// ancient reports whether e has gone unwritten for longer than
// AncientAfter(e), judged on the server's clock alone against last (the
// newest write of the queue): never by the stamp its writer put in it,
// whose clock may be behind ours by any amount, which would get a live
// candidate on time passed over at every move of the queue. The server's
// times may be whole seconds, hence the second more. Without them, the
// stamp by our clock.
func (q *Queue) ancient(e *Entry, last time.Time) bool {
	if !q.cfg.Ancient {
		return false
	}
	if !e.Written.IsZero() && !last.IsZero() {
		return last.Sub(e.Written) > q.cfg.AncientAfter(*e)+time.Second
	}
	return e.Stamp.IsZero() || q.cfg.Clock.Now().Sub(e.Stamp) > q.cfg.AncientAfter(*e)
}

// observed is the TTL e is observed with.
func (q *Queue) observed(e Entry) time.Duration {
	if d, judged := q.cfg.Silence(e); judged {
		return d
	}
	return q.cfg.TTL
}

// WaitTurn returns once no live entry is ahead of the candidate's: it is
// the head and may campaign for the key. It returns an error only when
// ctx ends; when the queue cannot be read, written or followed (refused,
// or failing for RetryFor) it returns, and the candidate campaigns as
// every candidate did without a queue.
func (q *Queue) WaitTurn(ctx context.Context) error {
	skipped := map[string]string{} // entry -> the version it was silent at
	watches := map[string]*observe.Watch{}
	backoff := retry.Backoff{Min: 100 * time.Millisecond, Max: 2 * time.Second}
	var failing run // of failed queue calls
	// failed handles a failed call: a retry after a pause (true), or the
	// end of the queue for this candidate (false, with err nil).
	failed := func(err error, retrying, giving string) (bool, error) {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		if q.store.Retryable(err) && q.again(ctx, &failing) {
			q.debug(retrying, err)
			if !q.cfg.Clock.Sleep(ctx, backoff.Next()) {
				return false, ctx.Err()
			}
			return true, nil
		}
		q.debug(giving, err)
		q.place.Lower(0)
		return false, nil
	}
	for {
		mine, others, err := q.store.List(ctx)
		if err != nil {
			if again, err := failed(err, "reading the candidates' queue failed; retrying",
				"cannot read the candidates' queue; campaigning without it"); !again {
				return err
			}
			continue
		}
		if mine == nil {
			// Skipped and deleted while we were frozen: back to the
			// tail, where our place is unknown again.
			q.place.Reset()
			if err := q.store.Rejoin(ctx); err != nil {
				if again, err := failed(err, "writing the queue entry again failed; retrying",
					"cannot write the queue entry again; campaigning without it"); !again {
					return err
				}
			}
			continue
		}
		failing = run{} // read the queue and found ourselves in it
		last := mine.Written
		for i := range others {
			if others[i].Written.After(last) {
				last = others[i].Written
			}
		}
		var ahead *Entry
		var dead []*Entry
		listed := map[string]*observe.Watch{}
		var n int64 // live entries ahead of ours
		for i := range others {
			e := &others[i]
			if v, ok := skipped[e.Key]; ok && v == e.Version || e.Ended || q.ancient(e, last) {
				dead = append(dead, e)
				continue
			}
			w := watches[e.Key]
			if w == nil {
				w = &observe.Watch{Now: q.cfg.Clock.Now}
			}
			w.Observe(e.Version, q.observed(*e))
			listed[e.Key] = w
			if before(e, mine) {
				n++
				if ahead == nil || before(ahead, e) {
					ahead = e
				}
			}
		}
		watches = listed
		q.place.Lower(n)
		// Tidy up the dead entries between our predecessor and us: we are
		// the one candidate that moves past them. A dead entry without a
		// rank stands behind everyone, where nobody moves past it.
		for _, e := range dead {
			if before(e, mine) && (ahead == nil || before(ahead, e)) || !e.Placed {
				if err := q.store.Delete(ctx, *e); err != nil && ctx.Err() == nil {
					q.debug("deleting a dead queue entry failed", err, "entry", e.Key)
				}
			}
		}
		q.declare(ctx)
		if ahead == nil {
			return nil
		}
		q.debug("queued behind another candidate", nil, "ahead", ahead.Key, "known_ahead", n)
		silent, err := q.follow(ctx, *ahead, watches[ahead.Key])
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, locker.ErrRefused):
			q.debug("cannot watch the queue; campaigning without it", err, "entry", ahead.Key)
			q.place.Lower(0)
			return nil
		case err != nil:
			q.debug("following the queue failed; reading it again", err, "entry", ahead.Key)
			if !q.cfg.Clock.Sleep(ctx, backoff.Next()) {
				return ctx.Err()
			}
		case silent != "":
			q.debug("candidate ahead is silent; moving past it", nil, "entry", ahead.Key, "version", silent)
			skipped[ahead.Key] = silent
			backoff.Reset()
		default:
			backoff.Reset()
		}
	}
}

// follow follows e, the entry ahead of ours, until it is deleted or ended
// (it returns "", nil) or, where silence judges it, has not changed for
// its silence bound on our clock (it returns the version it stayed at); w
// has observed it since it was first read. An entry that says it is the
// head puts ours at most one behind, which we declare at once.
func (q *Queue) follow(ctx context.Context, e Entry, w *observe.Watch) (silent string, err error) {
	w.Observe(e.Version, q.observed(e))
	f, err := q.store.Follow(ctx, e)
	if err != nil {
		return "", err
	}
	defer f.Stop()
	for {
		if _, head := Mode(e); head {
			q.place.Lower(1)
			q.declare(ctx)
		}
		wait := Forever
		if _, judged := q.cfg.Silence(e); judged {
			_, left, _ := w.Due()
			if left <= 0 {
				return e.Version, nil
			}
			wait = left
		}
		next, gone, err := f.Next(ctx, wait)
		switch {
		case err != nil:
			return "", err
		case gone:
			return "", nil
		}
		e = next
		w.Observe(e.Version, q.observed(e))
	}
}
