package kubernetes

import (
	"cmp"
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

	"github.com/leaderrun/leaderrun/internal/retry"
	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/observe"
)

// The candidates' queue (DESIGN §1.12, "Who wakes at a failover").
//
// Without it every standby watches the Lease, so a release wakes all of
// them and all of them send an update of which one succeeds. With it, a
// waiting candidate keeps a Lease of its own, <lease>.q.<term>, labelled
// with the key's Lease and annotated with the resourceVersion of its
// creation, which orders the queue (the etcd revision: it only grows). Only
// the candidate with no live entry ahead of it, the head, watches the key's
// Lease; every other one watches only the entry just ahead of it, and moves
// up when that entry is deleted or silent.
//
// A candidate renews its entry every TTL/2 with an update conditioned on
// its last write, so an entry whose resourceVersion stayed the same for
// TTL + observe.Allowance(TTL) on its successor's clock is skipped and
// deleted by that successor: a candidate killed or frozen in the queue
// holds it up for that long at most. An entry whose renewTime is far older
// than that by our wall clock is skipped at once: the queue decides only
// who tries first, so a wall-clock hint may serve here as it never may for
// a takeover. A candidate that finds its own entry gone creates a new one,
// at the tail.
//
// The key's Lease alone decides who leads, taken exactly as before
// (campaign.go): the head starts its observer clock on the holder when it
// becomes head, never earlier than it would have without the queue. A
// candidate that ignores the queue (an older leaderrun, an account without
// list on Leases) watches the Lease and races the head, which costs
// fairness, not safety. A refusal makes a candidate campaign as head at
// once; a failure that may pass, only once it has lasted queueRetryFor.

const (
	// labelQueue marks a candidate's entry with a digest of the key's
	// Lease name (a label value holds 63 characters at most).
	labelQueue = annPrefix + "queue"
	// annQueued is the resourceVersion of the entry's creation.
	annQueued = annPrefix + "queued"
	// entryInfix separates the key's Lease name from the entry's term.
	entryInfix = ".q."
)

// entry is this candidate's place in the queue.
type entry struct {
	name string
	term string

	mu  sync.Mutex
	cur *coordinationv1.Lease // as our last write left it
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
	e := &entry{name: l.name + entryInfix + term, term: term}
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

// join enqueues the candidate with a fresh term, which it returns. A
// failure that may pass (queueRetryable) is retried with a doubling pause
// for up to queueRetryFor: at a hundred candidates starting at once the
// server answers slowly for a while, and a candidate that campaigned
// without the queue would be woken by every release for as long as it
// waits. A refusal, or a failure that lasts, is returned, and the
// candidate campaigns without the queue, which costs fairness and
// requests, never safety.
func (l *Locker) join(ctx context.Context) (*entry, string, error) {
	backoff := retry.Backoff{Min: 100 * time.Millisecond, Max: 2 * time.Second}
	var failing retry.Run
	for {
		term := newTerm()
		e, err := l.enqueue(ctx, term)
		if err == nil || ctx.Err() != nil || !l.queueRetry(err, failing.Failed()) {
			return e, term, err
		}
		l.log.Debug("cannot join the candidates' queue yet; retrying", "lease", l.name, "error", oneLine(err.Error()))
		if !retry.Sleep(ctx, backoff.Next()) {
			return nil, term, ctx.Err()
		}
	}
}

// queueRetry reports whether a queue call that failed with err, in a run
// of failures that has lasted lasted, is worth another try.
func (l *Locker) queueRetry(err error, lasted time.Duration) bool {
	return queueRetryable(err) && lasted < l.queueRetryFor()
}

// queueRetryFor bounds a run of failing queue calls: three times what a
// silent entry holds up its successor, and at least 30s.
func (l *Locker) queueRetryFor() time.Duration {
	return max(30*time.Second, 3*(l.ttl+observe.Allowance(l.ttl)))
}

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

// create writes e afresh.
func (l *Locker) create(ctx context.Context, e *entry) error {
	cctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	id, secs, now := l.opts.ID, leaseSeconds(l.ttl), metav1.NewMicroTime(time.Now())
	got, err := l.client.Create(cctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: e.name, Namespace: l.namespace, Labels: map[string]string{labelQueue: l.queueLabel()}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &id, LeaseDurationSeconds: &secs, RenewTime: &now},
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
	e.mu.Lock()
	e.cur = got
	e.mu.Unlock()
	return nil
}

// keepEntry renews e every TTL/2 until ctx ends, creating it again (at the
// tail) when it is gone. Its successor skips it only after TTL + allowance
// without a renewal, and then only costs this candidate its place.
func (l *Locker) keepEntry(ctx context.Context, e *entry) {
	t := time.NewTimer(l.ttl / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := l.renewEntry(ctx, e); err != nil && ctx.Err() == nil {
			l.log.Debug("renewing the queue entry failed; retrying with the next renewal", "entry", e.name, "error", oneLine(err.Error()))
		}
		t.Reset(l.ttl / 2)
	}
}

// renewEntry makes one renewal of e.
func (l *Locker) renewEntry(ctx context.Context, e *entry) error {
	cctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	e.mu.Lock()
	next := e.cur.DeepCopy()
	e.mu.Unlock()
	now := metav1.NewMicroTime(time.Now())
	next.Spec.RenewTime = &now
	got, err := l.client.Update(cctx, next, metav1.UpdateOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return l.create(ctx, e)
	case apierrors.IsConflict(err):
		if got, err = l.client.Get(cctx, e.name, metav1.GetOptions{}); err != nil {
			return err
		}
	case err != nil:
		return err
	}
	e.mu.Lock()
	e.cur = got
	e.mu.Unlock()
	return nil
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

// place is where an entry stands: by the resourceVersion of its creation,
// then by name. An entry without one yet stands behind every other.
func place(ls *coordinationv1.Lease) (uint64, string) {
	rv, err := strconv.ParseUint(ls.Annotations[annQueued], 10, 64)
	if err != nil || rv == 0 {
		rv = ^uint64(0)
	}
	return rv, ls.Name
}

// ahead reports whether a stands before b.
func ahead(a, b *coordinationv1.Lease) bool {
	ra, na := place(a)
	rb, nb := place(b)
	return cmp.Or(cmp.Compare(ra, rb), strings.Compare(na, nb)) < 0
}

// waitTurn returns once no live entry is ahead of e: this candidate is the
// head and may campaign for the key's Lease. It returns an error only when
// ctx ends; when the queue cannot be read or written (refused, or failing
// for queueRetryFor) it returns, and the candidate campaigns as every
// candidate did without a queue.
func (l *Locker) waitTurn(ctx context.Context, e *entry) error {
	skipped := map[string]string{} // entry -> the resourceVersion it was silent at
	// Every live entry is observed with each read of the queue, so that
	// entries frozen together are passed over together: the one behind
	// the first has stayed silent as long.
	watches := map[string]*observe.Watch{}
	backoff := retry.Backoff{Min: 100 * time.Millisecond, Max: 2 * time.Second}
	ancient := 3 * (l.ttl + observe.Allowance(l.ttl))
	var failing retry.Run // of failed queue calls
	for {
		cctx, cancel := context.WithTimeout(ctx, l.timeout)
		list, err := l.client.List(cctx, metav1.ListOptions{LabelSelector: labels.Set{labelQueue: l.queueLabel()}.String()})
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if l.queueRetry(err, failing.Failed()) {
				l.log.Debug("reading the candidates' queue failed; retrying", "lease", l.name, "error", oneLine(err.Error()))
				if !retry.Sleep(ctx, backoff.Next()) {
					return ctx.Err()
				}
				continue
			}
			l.log.Debug("cannot read the candidates' queue (the account needs list on leases); campaigning without it", "lease", l.name, "error", oneLine(err.Error()))
			return nil
		}
		var me *coordinationv1.Lease
		var live, dead []*coordinationv1.Lease
		for i := range list.Items {
			it := &list.Items[i]
			if !strings.HasPrefix(it.Name, l.name+entryInfix) {
				continue
			}
			switch {
			case it.Name == e.name:
				me = it
			case skipped[it.Name] == it.ResourceVersion,
				it.Spec.RenewTime == nil || time.Since(it.Spec.RenewTime.Time) > ancient:
				dead = append(dead, it)
			default:
				live = append(live, it)
			}
		}
		if me == nil || me.Annotations[annQueued] == "" {
			// Skipped and deleted while we were frozen: back to the tail.
			if err := l.create(ctx, e); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if l.queueRetry(err, failing.Failed()) {
					l.log.Debug("writing the queue entry again failed; retrying", "lease", l.name, "error", oneLine(err.Error()))
					if !retry.Sleep(ctx, backoff.Next()) {
						return ctx.Err()
					}
					continue
				}
				l.log.Debug("cannot write the queue entry again; campaigning without it", "entry", e.name, "error", oneLine(err.Error()))
				return nil
			}
			continue
		}
		failing.Reset() // read the queue and found ourselves in it
		var before *coordinationv1.Lease
		listed := map[string]*observe.Watch{}
		for _, it := range live {
			w := watches[it.Name]
			if w == nil {
				w = &observe.Watch{}
			}
			w.Observe(it.ResourceVersion, l.ttl)
			listed[it.Name] = w
			if ahead(it, me) && (before == nil || ahead(before, it)) {
				before = it
			}
		}
		watches = listed
		// Tidy up the dead entries between our predecessor and us: we are
		// the one candidate that moves past them. A dead entry that never
		// got its place stands behind everyone, where nobody moves past
		// it: its create went through and both the write of its place and
		// the delete that followed failed (join retries such failures).
		for _, it := range dead {
			if ahead(it, me) && (before == nil || ahead(before, it)) || it.Annotations[annQueued] == "" {
				l.deleteEntry(ctx, it)
			}
		}
		if before == nil {
			return nil
		}
		l.log.Debug("queued behind another candidate", "lease", l.name, "ahead", before.Name)
		silent, err := l.follow(ctx, before, watches[before.Name])
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, locker.ErrRefused):
			l.log.Debug("cannot watch the queue; campaigning without it", "entry", before.Name, "error", oneLine(err.Error()))
			return nil
		case err != nil:
			l.log.Debug("following the queue failed; reading it again", "entry", before.Name, "error", oneLine(err.Error()))
			if !retry.Sleep(ctx, backoff.Next()) {
				return ctx.Err()
			}
		case silent != "":
			l.log.Debug("candidate ahead is silent; moving past it", "entry", before.Name, "resource_version", silent)
			skipped[before.Name] = silent
			backoff.Reset()
		default:
			backoff.Reset()
		}
	}
}

// follow watches the one entry ahead of ours until it is deleted (it
// returns "", nil) or has not changed for TTL + observe.Allowance(TTL) on
// our clock (it returns the resourceVersion it stayed at); seen has
// observed it since it was first read.
func (l *Locker) follow(ctx context.Context, it *coordinationv1.Lease, seen *observe.Watch) (silent string, err error) {
	rv := it.ResourceVersion
	seen.Observe(rv, l.ttl)
	w, err := l.watchName(ctx, it.Name, rv)
	if err != nil {
		return "", err
	}
	defer w.Stop()
	for {
		_, left, _ := seen.Due()
		if left <= 0 {
			return rv, nil
		}
		t := time.NewTimer(left)
		select {
		case <-ctx.Done():
			t.Stop()
			return "", ctx.Err()
		case <-t.C:
			continue
		case ev, ok := <-w.ResultChan():
			t.Stop()
			switch {
			case !ok || ev.Type == watch.Error:
				return "", errWatchEnded
			case ev.Type == watch.Deleted:
				return "", nil
			}
			if ls, isLease := ev.Object.(*coordinationv1.Lease); isLease && ls.Name == it.Name {
				rv = ls.ResourceVersion
				seen.Observe(rv, l.ttl)
			}
		}
	}
}

// errWatchEnded: the server ended a watch of an entry; read the queue again.
var errWatchEnded = errors.New("the watch of the queue entry ended")

// deleteEntry deletes a dead entry if it is still as we read it.
func (l *Locker) deleteEntry(ctx context.Context, it *coordinationv1.Lease) {
	cctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	if err := l.client.DeleteIf(cctx, it.Name, it.ResourceVersion); err != nil && !apierrors.IsNotFound(err) {
		l.log.Debug("deleting a dead queue entry failed", "entry", it.Name, "error", oneLine(err.Error()))
	}
}
