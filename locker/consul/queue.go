package consul

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/leaderrun/leaderrun/internal/retry"
	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/observe"
	"github.com/leaderrun/leaderrun/locker/queueplace"
)

// The candidates' queue (DESIGN §1.12, "Who wakes at a failover").
//
// Without it every standby follows the lock key with a blocking query, so a
// release (and every heartbeat of the leader) wakes all of them and all of
// them race with an acquire. With it, a waiting candidate holds an entry
// <path>/~queue/<session>, locked by its session, and only the candidate
// whose entry has no live entry ahead of it (by CreateIndex, the Raft index
// of the entry's creation) follows the lock key: the head. Every other one
// follows only the entry just ahead of it, with a blocking query on that
// one key, and moves up when that entry is deleted, unlocked (its session
// ended) or silent.
//
// Only the candidates near the head prove that they are alive. A candidate
// rewrites its entry with every renewal of its session (keepCandidate,
// every TTL/3) once it knows of at most one live entry ahead of its own:
// it learns that at each read of the queue, and from the entry ahead when
// that one says it is the head. The number ahead of an entry only falls
// (new entries join at the tail), so a candidate that began rewriting keeps
// on until it leaves; it writes its entry at once when it learns that it is
// the head or one behind it, and then with each renewal. Each write says
// how many entries the writer knew ahead of it ("ahead=0", "ahead=1";
// "ahead=?" for one that does not rewrite), so its successor knows, from
// the entry alone, whether silence means anything. An entry that rewrites, not written for TTL +
// observe.Allowance(TTL) as its successor sees it on its own clock, is
// skipped and deleted: a candidate killed or frozen next to the head holds
// the queue up for at most that long, not for the two TTLs Consul takes to
// invalidate its session. An entry deeper in the queue is written once,
// and its successor waits only for it to be deleted or unlocked: Consul
// ends a dead candidate's session within two TTLs and its entry is
// released then, long before the queue reaches it in most cases. An entry
// without "ahead=" (an older leaderrun) is taken to rewrite, as older ones
// did. A candidate that finds its entry gone (it was frozen, and skipped)
// writes it again, at the tail, and counts its place afresh.
//
// A successor could instead infer that an entry rewrites from seeing its
// ModifyIndex move, but it reads only the one entry it follows: once that
// one is skipped, a frozen entry further ahead that it never saw move
// would cost it two TTLs, where entries frozen together must be passed
// over together. The value says so at once.
//
// The queue decides only who tries first, never who leads: the lock key
// alone does, taken exactly as before (campaign, observe.go). A head
// observes the holder from the moment it becomes head, so its observer
// clock starts no earlier than it would without the queue. A candidate that
// ignores the queue (an older leaderrun, a token that may not write beside
// the key) follows the key and races the head: it may win ahead of its
// turn, which costs fairness, not safety. A refusal makes a candidate
// campaign as head at once; a failure that may pass, only once it has
// lasted queueRetryFor (a TTL when joining).

// queueDir separates the entries from the lock key and its once-per
// records. Its '~' is a character no key or prefix may hold
// (locker.ValidateKey), like that of the records: "<key>/.queue/x" is a
// valid key, whose lock key would read as a live place in <key>'s queue,
// hold up every candidate of <key> behind it, and be deleted as a silent
// one while its holder leads.
const queueDir = "/~queue/"

// entryKey is the queue entry of the candidate with session id.
func (l *Locker) entryKey(id string) string { return l.path + queueDir + id }

// spot is what a queued candidate knows of its place (queueplace: the
// live entries ahead of its own, unknown until a read of the queue shows
// it one or none, and what its entry last said), and the beat of its
// writes. waitTurn lowers it; keepCandidate reads it. Near the head, a
// candidate rewrites its entry with each renewal.
type spot struct {
	queueplace.Place
	beat atomic.Uint64
}

const noSpot = queueplace.Unknown

func newSpot() *spot {
	s := &spot{}
	s.Reset()
	return s
}

// entryValue is what a candidate writes into its entry: its ID, a beat that
// changes with every write, and how many live entries it knows ahead of it.
func entryValue(id string, beat uint64, ahead int64) []byte {
	place := "?"
	if ahead <= 1 {
		place = strconv.FormatInt(ahead, 10)
	}
	return []byte(id + " " + strconv.FormatUint(beat, 10) + " ahead=" + place)
}

// entryMode reads an entry's value: whether its writer rewrites it (so
// that its silence means it is dead or frozen), and whether it is the head.
// A value with no place in it is an older leaderrun's, which rewrites.
func entryMode(value []byte) (rewrites, head bool) {
	v := string(value)
	i := strings.LastIndex(v, " ahead=")
	if i < 0 {
		return true, false
	}
	switch v[i+len(" ahead="):] {
	case "0":
		return true, true
	case "1":
		return true, false
	}
	return false, false
}

// declare writes the candidate's entry at once when its place near the
// head is news to it, so that its successor judges it by silence (and the
// one after learns its own place) without waiting for the next renewal: a
// candidate frozen a moment after it became head is passed over after TTL
// + allowance, not when Consul ends its session.
func (l *Locker) declare(ctx context.Context, id string, place *spot) {
	ahead, news := place.News()
	if !news {
		return
	}
	if err := l.enqueue(ctx, id, place.beat.Add(1), ahead); err != nil {
		if ctx.Err() == nil {
			l.log.Debug("queue entry write failed; writing it with the next renewal", "key", l.entryKey(id), "error", err)
		}
		return
	}
	place.Said(ahead)
}

// enqueue writes the candidate's entry, locked by its session: creating it
// (at the tail of the queue) when it is absent, and otherwise moving its
// ModifyIndex, which its successor reads as a sign of life. beat makes
// every write change the value; Consul moves no index for a write that
// changes nothing. ahead is the number of live entries it knows ahead.
//
// The write is not cut short when ctx ends: Consul would still apply a
// write whose request was abandoned, possibly after dequeue's delete, and
// leave an entry behind. It ends within callTimeout all the same.
func (l *Locker) enqueue(ctx context.Context, id string, beat uint64, ahead int64) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
	defer cancel()
	var ok bool
	err := l.do(cctx, func(c *api.Client) (err error) {
		ok, _, err = c.KV().Acquire(&api.KVPair{
			Key: l.entryKey(id), Session: id, Value: entryValue(l.opts.ID, beat, ahead),
		}, l.writeOpts(cctx))
		return err
	})
	switch {
	case err != nil:
		return l.fail("write queue entry "+l.entryKey(id), err)
	case !ok:
		return fmt.Errorf("write queue entry %s: %w", l.entryKey(id), errEntryRefused)
	}
	return nil
}

// join writes the candidate's first queue entry. A failure that may pass
// (anything but a refusal) is retried with a doubling pause while less
// than half a TTL has gone since the session was created: nothing renews
// it before the campaign starts, and the last try (at most callTimeout,
// half of MinTTL) ends before the session's TTL. At a hundred candidates
// starting at once the servers answer slowly for a while, and a candidate
// that campaigned without the queue would be woken by every release for
// as long as it waits. A refusal, or a failure that lasts, is returned,
// and the candidate campaigns without the queue, which costs fairness and
// requests, never safety.
func (l *Locker) join(ctx context.Context, id string) error {
	backoff := retry.Backoff{Min: 100 * time.Millisecond, Max: 2 * time.Second}
	began := time.Now() // the session was created just before
	var failing retry.Run
	for {
		err := l.enqueue(ctx, id, 0, noSpot)
		if err == nil || ctx.Err() != nil || !l.queueRetry(ctx, err, &failing) || time.Since(began) >= l.opts.TTL/2 {
			return err
		}
		l.log.Debug("cannot join the candidates' queue yet; retrying", "key", l.path, "error", err)
		if !retry.Sleep(ctx, backoff.Next()) {
			return ctx.Err()
		}
	}
}

// queueRetry records a failed queue call in run and reports whether it is
// worth another try: not a refusal (ACL, TLS), not a lock Consul would not
// grant (the session is gone), and the run within queueRetryFor and half
// of what ctx has left (an --acquire-timeout; retry.Run.Again).
func (l *Locker) queueRetry(ctx context.Context, err error, run *retry.Run) bool {
	return !errors.Is(err, locker.ErrRefused) && !errors.Is(err, errEntryRefused) && run.Again(ctx, l.queueRetryFor())
}

// queueRetryFor bounds a run of failing queue calls: three times what a
// silent entry holds up its successor, and at least 30s.
func (l *Locker) queueRetryFor() time.Duration {
	return max(30*time.Second, 3*(l.opts.TTL+observe.Allowance(l.opts.TTL)))
}

// errEntryRefused: Consul did not lock the entry for our session (it has
// ended).
var errEntryRefused = errors.New("Consul refused the lock")

// dequeue deletes the candidate's entry on a fresh short timeout, so the
// next candidate moves up at once. Failure only means the successor skips
// the entry once it is silent (or unlocked) for long enough.
func (l *Locker) dequeue(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if err := l.do(ctx, func(c *api.Client) error {
		_, err := c.KV().Delete(l.entryKey(id), l.writeOpts(ctx))
		return err
	}); err != nil {
		l.log.Debug("delete queue entry failed; the next candidate skips it once it is silent", "key", l.entryKey(id), "error", l.scrub(err))
	}
}

// waitTurn returns once no live entry is ahead of ours: this candidate is
// the head and may campaign for the key. It returns an error only when ctx
// ends; when the queue cannot be read or written (refused, or failing for
// queueRetryFor) it returns, and the candidate campaigns as every
// candidate did without a queue.
func (l *Locker) waitTurn(ctx context.Context, id string, place *spot) error {
	mine := l.entryKey(id)
	skipped := map[string]uint64{} // entry -> the ModifyIndex it was silent at
	// Every entry ahead is observed with each read of the queue, so that
	// entries frozen together are passed over together: the one behind
	// the first has stayed silent as long.
	watches := map[string]*observe.Watch{}
	backoff := retry.Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second}
	var failing retry.Run // of failed queue calls
	for {
		var pairs api.KVPairs
		err := l.do(ctx, func(c *api.Client) (err error) {
			pairs, _, err = c.KV().List(l.path+queueDir, l.queryOpts(ctx, false))
			return err
		})
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if l.queueRetry(ctx, err, &failing) {
				l.log.Debug("reading the candidates' queue failed; retrying", "key", l.path, "error", l.scrub(err))
				if !retry.Sleep(ctx, backoff.Next()) {
					return ctx.Err()
				}
				continue
			}
			l.log.Debug("cannot read the candidates' queue; campaigning without it", "key", l.path, "error", l.scrub(err))
			place.Lower(0)
			return nil
		}
		var me, ahead *api.KVPair
		for _, p := range pairs {
			if p.Key == mine {
				me = p
			}
		}
		if me == nil || me.Session != id {
			// Skipped and deleted while we were frozen: back to the tail,
			// where our place is unknown again.
			place.Reset()
			if err := l.enqueue(ctx, id, place.beat.Add(1), noSpot); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if l.queueRetry(ctx, err, &failing) {
					l.log.Debug("writing the queue entry again failed; retrying", "key", l.path, "error", l.scrub(err))
					if !retry.Sleep(ctx, backoff.Next()) {
						return ctx.Err()
					}
					continue
				}
				l.log.Debug("cannot write the queue entry again; campaigning without it", "key", mine, "error", err)
				place.Lower(0)
				return nil
			}
			continue
		}
		failing.Reset() // read the queue and found ourselves in it
		var dead []*api.KVPair
		listed := map[string]*observe.Watch{}
		for _, p := range pairs {
			if p.CreateIndex >= me.CreateIndex || p.Key == mine {
				continue
			}
			if p.Session == "" || skipped[p.Key] == p.ModifyIndex {
				dead = append(dead, p)
				continue
			}
			w := watches[p.Key]
			if w == nil {
				w = &observe.Watch{}
			}
			w.Observe(strconv.FormatUint(p.ModifyIndex, 10), l.opts.TTL)
			listed[p.Key] = w
			if ahead == nil || p.CreateIndex > ahead.CreateIndex {
				ahead = p
			}
		}
		watches = listed
		place.Lower(int64(len(listed)))
		// Tidy up the dead entries between our predecessor and us: we are
		// the one candidate that moves past them.
		for _, p := range dead {
			if ahead == nil || p.CreateIndex > ahead.CreateIndex {
				l.deleteEntry(ctx, p)
			}
		}
		if ahead == nil {
			place.Lower(0)
			l.declare(ctx, id, place)
			return nil
		}
		l.declare(ctx, id, place)
		l.log.Debug("queued behind another candidate", "key", l.path, "ahead", ahead.Key)
		silent, err := l.follow(ctx, id, ahead, watches[ahead.Key], place)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			l.log.Debug("following the queue failed; reading it again", "key", ahead.Key, "error", err)
			if !retry.Sleep(ctx, backoff.Next()) {
				return ctx.Err()
			}
		case silent != 0:
			l.log.Debug("candidate ahead is silent; moving past it", "key", ahead.Key, "index", silent)
			skipped[ahead.Key] = silent
			backoff.Reset()
		default:
			backoff.Reset()
		}
	}
}

// follow waits, with blocking queries on the one entry ahead of ours, until
// that entry is deleted or unlocked (it returns 0, nil) or, while its value
// says that it rewrites, has not been written for TTL +
// observe.Allowance(TTL) on our clock (it returns the ModifyIndex it
// stayed at); w has observed it since it was first read. An entry that
// says it is the head puts ours at most one behind.
func (l *Locker) follow(ctx context.Context, id string, ahead *api.KVPair, w *observe.Watch, place *spot) (silent uint64, err error) {
	index, value := ahead.ModifyIndex, ahead.Value
	w.Observe(strconv.FormatUint(index, 10), l.opts.TTL)
	for {
		rewrites, head := entryMode(value)
		if head {
			place.Lower(1)
			l.declare(ctx, id, place)
		}
		wait := blockWait
		if rewrites {
			_, left, _ := w.Due()
			if left <= 0 {
				return index, nil
			}
			wait = min(max(left, minWait), blockWait)
		}
		pair, _, err := l.readKeyAt(ctx, ahead.Key, max(index, 1), wait)
		if err != nil {
			return 0, err
		}
		if pair == nil || pair.Session != ahead.Session || pair.CreateIndex != ahead.CreateIndex {
			return 0, nil
		}
		if pair.ModifyIndex < index {
			return 0, nil // the index went backwards: read the queue afresh
		}
		index, value = pair.ModifyIndex, pair.Value
		w.Observe(strconv.FormatUint(index, 10), l.opts.TTL)
	}
}

// deleteEntry deletes a dead entry if it is still as we read it.
func (l *Locker) deleteEntry(ctx context.Context, p *api.KVPair) {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	err := l.do(cctx, func(c *api.Client) error {
		_, _, err := c.KV().DeleteCAS(&api.KVPair{Key: p.Key, ModifyIndex: p.ModifyIndex}, l.writeOpts(cctx))
		return err
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		l.log.Debug("delete dead queue entry failed", "key", p.Key, "error", l.scrub(err))
	}
}
