package kubernetes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/leaderrun/leaderrun/locker/queue"
)

// The candidates' queue (DESIGN §1.12, "Who wakes at a failover") is
// package queue's, on this store: a Lease per candidate,
// <lease>.q.<term>, labelled with a digest of the key's Lease name and
// ranked by the resourceVersion of its creation (annQueued), which a
// successor watches. With no session to end a dead candidate's entry,
// every entry proves it is alive: its candidate renews it (keepEntry)
// every TTL/2 near the head and every 2 x TTL deeper (queueConfig), and
// the ancient rule judges it by the server's times of its writes.

const (
	// labelQueue marks a candidate's entry with a digest of the key's
	// Lease name (a label value holds 63 characters at most).
	labelQueue = annPrefix + "queue"
	// annQueued is the resourceVersion of the entry's creation.
	annQueued = annPrefix + "queued"
	// annAhead is how many live entries the entry's writer knew ahead of
	// it: "0" (the head), "1", or "?" (more, or not known yet).
	annAhead = annPrefix + "ahead"
	// entryInfix separates the key's Lease name from the entry's term.
	entryInfix = ".q."
	// annWho describes the entry's candidate (queue.Who's JSON) for
	// status; older releases wrote none, and pass over it.
	annWho = annPrefix + "candidate"
)

// entry is this candidate's place in the queue.
type entry struct {
	name string
	term string
	who  string // queue.Who, encoded: the same in every write

	// place is what the candidate knows of its place (queue.Place): waitTurn
	// lowers it; every write declares it.
	place *queue.Place
	// kick tells keepEntry that the beat may have changed.
	kick chan struct{}

	write sync.Mutex // one write of the entry at a time
	mu    sync.Mutex
	cur   *coordinationv1.Lease // as our last write left it
	wrote time.Time             // when our last write returned
}

const noSpot = queue.Unknown

func newEntry(name, term, who string) *entry {
	return &entry{name: name, term: term, who: who, place: queue.NewPlace(), kick: make(chan struct{}, 1)}
}

// toEntry is an entry as the queue reads it: ranked by the
// resourceVersion of its creation (annQueued; without one it stands
// behind every other), its version the resourceVersion, its times the
// server's of its last write and the renewTime its candidate wrote. An
// entry without annAhead is an older leaderrun's, which renews every
// TTL/2.
func toEntry(ls *coordinationv1.Lease) queue.Entry {
	e := queue.Entry{Key: ls.Name, Version: ls.ResourceVersion, Rank: rank(ls), Placed: ls.Annotations[annQueued] != "",
		Written: written(ls), Ref: ls}
	said, ok := ls.Annotations[annAhead]
	e.Said, e.Unsaid = said, !ok
	if ls.Spec.RenewTime != nil {
		e.Stamp = ls.Spec.RenewTime.Time
	}
	return e
}

// rank is the resourceVersion of the entry's creation, or the largest.
func rank(ls *coordinationv1.Lease) uint64 {
	rv, err := strconv.ParseUint(ls.Annotations[annQueued], 10, 64)
	if err != nil || rv == 0 {
		rv = ^uint64(0)
	}
	return rv
}

// beat is how often the candidate renews its entry.
func (l *Locker) beat(e *entry) time.Duration {
	if e.place.Near() {
		return l.ttl / 2
	}
	return 2 * l.ttl
}

// queueConfig is the key's queue. A deep entry is judged with a silence
// TTL of 3 x TTL (queue.Config.DeepBound): a deep candidate on time sends
// its next write 2 x TTL after its last one returned, and the successor
// saw the version of that last one no earlier than it was applied. The
// bound leaves TTL + Allowance(3 x TTL) beyond the beat for the two
// writes' latencies, the watch's delivery and the clocks' rates (a beat
// of 2 x TTL stretched by 2.5% stays well inside it): more than the TTL/2
// + allowance a fast entry has, so a deep candidate on time is not
// skipped where a near one on the same connection would not be. With no
// session to end a dead candidate's entry, the ancient rule applies.
func (l *Locker) queueConfig() queue.Config {
	return queue.Config{TTL: l.ttl, DeepTTL: 3 * l.ttl, Ancient: true, Log: l.log.With("lease", l.name),
		ErrText: func(err error) any { return oneLine(err.Error()) }}
}

// written is when the server last wrote ls, by the server's own clock
// (the times of its managedFields, whole seconds), or zero when it keeps
// none.
func written(ls *coordinationv1.Lease) time.Time {
	var t time.Time
	for _, f := range ls.ManagedFields {
		if f.Time != nil && f.Time.After(t) {
			t = f.Time.Time
		}
	}
	return t
}

// queueLabel is the value of labelQueue for the key's Lease.
func (l *Locker) queueLabel() string {
	sum := sha256.Sum256([]byte(l.name))
	return hex.EncodeToString(sum[:16])
}

// enqueue creates the candidate's entry at the tail of the queue, and
// writes its place (the creation's resourceVersion) on it. It first makes
// sure it will be allowed to delete the entry: a deletion of the name not
// yet created is refused (403) without the right and answered 404 with it.
// Entries that could not be deleted would pile up, one per candidacy.
func (l *Locker) enqueue(ctx context.Context, term string) (*entry, error) {
	e := newEntry(l.name+entryInfix+term, term, queue.NewWho(l.opts).Encode())
	if len(e.name) > 253 {
		return nil, errTooLong
	}
	cctx, cancel := context.WithTimeout(ctx, l.timeout)
	err := l.client.Delete(cctx, e.name, metav1.DeleteOptions{})
	cancel()
	if err == nil || !apierrors.IsNotFound(err) {
		if err == nil {
			err = errNameTaken
		}
		return nil, err
	}
	if err := l.create(ctx, e); err != nil {
		// The create may have gone through: an entry without its place
		// stands last, where nobody would ever delete it.
		l.dequeue(e)
		return nil, err
	}
	return e, nil
}

// errTooLong: the key's Lease name leaves no room for an entry's name.
var errTooLong = errors.New("the Lease name leaves no room for a queue entry")

// errNameTaken: a fresh entry's name, random, was there already.
var errNameTaken = errors.New("a fresh entry name already existed")

// join enqueues the candidate with a fresh term, which it returns
// (queue.Join: a failure that may pass is retried for up to
// queueRetryFor).
func (l *Locker) join(ctx context.Context) (e *entry, term string, err error) {
	err = queue.Join(ctx, l.queueConfig(), queueRetryable, 0, func(ctx context.Context) (err error) {
		term = newTerm()
		e, err = l.enqueue(ctx, term)
		return err
	})
	return e, term, err
}

// queueRetryFor bounds a run of failing queue calls (queue.RetryFor).
func (l *Locker) queueRetryFor() time.Duration { return queue.RetryFor(l.ttl) }

// queueRetryable reports whether a failed queue call may succeed when
// made again: no answer (a timeout, a broken connection), or an answer of
// an overloaded or failing server. A refusal (RBAC, credentials, TLS) or a
// request the server rejects will not.
func queueRetryable(err error) bool {
	if errors.Is(err, errTooLong) || errors.Is(err, errNameTaken) || apierrors.IsUnauthorized(err) || transportRefusal(err) {
		return false
	}
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		code := st.Status().Code
		return code >= 500 || code == http.StatusTooManyRequests || code == http.StatusRequestTimeout
	}
	return true
}

// create writes e afresh, at the tail, where its place is not known yet.
func (l *Locker) create(ctx context.Context, e *entry) error {
	e.write.Lock()
	defer e.write.Unlock()
	return l.createLocked(ctx, e)
}

func (l *Locker) createLocked(ctx context.Context, e *entry) error {
	cctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	e.place.Reset()
	id, secs, now := l.opts.ID, leaseSeconds(l.ttl), metav1.NewMicroTime(time.Now())
	got, err := l.client.Create(cctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: e.name, Namespace: l.namespace,
			Labels:      map[string]string{labelQueue: l.queueLabel()},
			Annotations: map[string]string{annAhead: queue.Said(noSpot), annWho: e.who},
		},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &id, LeaseDurationSeconds: &secs, RenewTime: &now},
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	next := got.DeepCopy()
	if next.Annotations == nil {
		next.Annotations = map[string]string{}
	}
	next.Annotations[annQueued] = got.ResourceVersion
	if got, err = l.client.Update(cctx, next, metav1.UpdateOptions{}); err != nil {
		return err
	}
	l.wrote(e, got, noSpot)
	return nil
}

// wrote records a successful write of e, which declared ahead.
func (l *Locker) wrote(e *entry, got *coordinationv1.Lease, ahead int64) {
	e.place.Said(ahead)
	e.mu.Lock()
	e.cur, e.wrote = got, time.Now()
	e.mu.Unlock()
}

// keepEntry renews e with its beat (l.beat) until ctx ends, creating it
// again (at the tail) when it is gone; a failed renewal is tried again
// after TTL/2. Its successor skips it only after its silence bound
// without a renewal, and then only costs this candidate its place.
func (l *Locker) keepEntry(ctx context.Context, e *entry) {
	t := time.NewTimer(l.beat(e))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.kick:
		case <-t.C:
		}
		e.mu.Lock()
		left := l.beat(e) - time.Since(e.wrote)
		e.mu.Unlock()
		if left > 0 {
			t.Reset(left)
			continue
		}
		if _, err := l.renewEntry(ctx, e, e.place.Ahead()); err != nil && ctx.Err() == nil {
			l.log.Debug("renewing the queue entry failed; retrying", "entry", e.name, "error", oneLine(err.Error()))
			t.Reset(l.ttl / 2)
			continue
		}
		t.Reset(l.beat(e))
	}
}

// renewEntry makes one renewal of e, which declares ahead, the place its
// candidate knows, and returns what it declared: the entry gone, it
// creates it afresh, whose place is not known. A conflict (a write of
// ours whose answer was lost) is read back and the renewal made once more
// on it.
func (l *Locker) renewEntry(ctx context.Context, e *entry, ahead int64) (said int64, err error) {
	e.write.Lock()
	defer e.write.Unlock()
	cctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	e.mu.Lock()
	cur := e.cur
	e.mu.Unlock()
	for try := 0; ; try++ {
		next := cur.DeepCopy()
		if next.Annotations == nil {
			next.Annotations = map[string]string{}
		}
		next.Annotations[annAhead] = queue.Said(ahead)
		now := metav1.NewMicroTime(time.Now())
		next.Spec.RenewTime = &now
		got, err := l.client.Update(cctx, next, metav1.UpdateOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return noSpot, l.createLocked(ctx, e)
		case apierrors.IsConflict(err) && try == 0:
			if cur, err = l.client.Get(cctx, e.name, metav1.GetOptions{}); err != nil {
				return ahead, err
			}
			continue
		case err != nil:
			return ahead, err
		}
		l.wrote(e, got, ahead)
		return ahead, nil
	}
}

// dequeue deletes e on a fresh short timeout, so the next candidate moves
// up at once; failing that, it skips e once e is silent for long enough.
func (l *Locker) dequeue(e *entry) {
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	defer cancel()
	if err := l.client.Delete(ctx, e.name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		l.log.Debug("deleting the queue entry failed; the next candidate skips it once it is silent", "entry", e.name, "error", oneLine(err.Error()))
	}
}

// waitTurn returns once no live entry is ahead of e (queue.WaitTurn).
func (l *Locker) waitTurn(ctx context.Context, e *entry) error {
	return queue.New(l.queueConfig(), entries{l, e}, e.place).WaitTurn(ctx)
}

// entries is the queue.Store of the candidate with entry e.
type entries struct {
	l *Locker
	e *entry
}

// List reads the Leases with the queue's label whose names are entries
// of the key's Lease.
func (s entries) List(ctx context.Context) (mine *queue.Entry, others []queue.Entry, err error) {
	cctx, cancel := context.WithTimeout(ctx, s.l.timeout)
	list, err := s.l.client.List(cctx, metav1.ListOptions{LabelSelector: labels.Set{labelQueue: s.l.queueLabel()}.String()})
	cancel()
	if err != nil {
		return nil, nil, err
	}
	for i := range list.Items {
		it := &list.Items[i]
		switch e := toEntry(it); {
		case !strings.HasPrefix(it.Name, s.l.name+entryInfix):
		case it.Name != s.e.name:
			others = append(others, e)
		case e.Placed:
			mine = &e
		}
	}
	return mine, others, nil
}

func (s entries) Rejoin(ctx context.Context) error { return s.l.create(ctx, s.e) }

// Declare writes the entry at once, and tells keepEntry that its beat may
// have changed.
func (s entries) Declare(ctx context.Context, ahead int64) (int64, error) {
	said, err := s.l.renewEntry(ctx, s.e, ahead)
	select {
	case s.e.kick <- struct{}{}:
	default:
	}
	return said, err
}

func (s entries) Retryable(err error) bool { return queueRetryable(err) }

// Delete deletes a dead entry if it is still as we read it.
func (s entries) Delete(ctx context.Context, e queue.Entry) error {
	cctx, cancel := context.WithTimeout(ctx, s.l.timeout)
	defer cancel()
	if err := s.l.client.DeleteIf(cctx, e.Key, e.Version); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// Follow watches the one entry ahead of ours.
func (s entries) Follow(ctx context.Context, e queue.Entry) (queue.Follower, error) {
	w, err := s.l.watchName(ctx, e.Key, e.Version)
	if err != nil {
		return nil, err
	}
	return &follower{w: w, cur: e}, nil
}

type follower struct {
	w   watch.Interface
	cur queue.Entry
}

// Next waits for an event of the watch, or for wait.
func (f *follower) Next(ctx context.Context, wait time.Duration) (queue.Entry, bool, error) {
	var due <-chan time.Time
	if wait != queue.Forever {
		t := time.NewTimer(wait)
		defer t.Stop()
		due = t.C
	}
	select {
	case <-ctx.Done():
		return f.cur, false, ctx.Err()
	case <-due:
	case ev, ok := <-f.w.ResultChan():
		switch {
		case !ok || ev.Type == watch.Error:
			return f.cur, false, errWatchEnded
		case ev.Type == watch.Deleted:
			return f.cur, true, nil
		}
		if ls, isLease := ev.Object.(*coordinationv1.Lease); isLease && ls.Name == f.cur.Key {
			f.cur = toEntry(ls)
		}
	}
	return f.cur, false, nil
}

func (f *follower) Stop() { f.w.Stop() }

// errWatchEnded: the server ended a watch of an entry; read the queue again.
var errWatchEnded = errors.New("the watch of the queue entry ended")
