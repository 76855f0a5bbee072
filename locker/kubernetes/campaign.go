package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/leaderrun/leaderrun/internal/retry"
	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/observe"
)

// watchTimeout makes the server end a watch after a while, so that a watch
// silently lost in the network is replaced.
const watchTimeout = 5 * time.Minute

// Acquire waits until this candidate holds the Lease and returns the
// leadership. It takes the Lease when it is absent (create), free (update),
// or held by a holder that follows the observer-clock contract and has not
// renewed for its TTL plus observe.Allowance as seen on our own clock
// (update conditioned on the resourceVersion we saw, DESIGN §1.12). Between
// tries it watches the Lease; a failed watch is replaced after a fresh read.
//
// With Options.NoWait it returns ErrHeld as soon as a holder looks alive: its
// renewTime is recent by our wall clock (a hint used only to give up, never
// to take over), or we saw it renew. A holder that looks dead is still
// watched for its TTL before it is taken over.
//
// Unless it only tries once, a candidate first waits for its turn in the
// queue of candidates (queue.go), so that a release wakes only the next one.
func (l *Locker) Acquire(ctx context.Context) (locker.Lease, error) {
	if l.opts.NoWait {
		return l.campaign(ctx, newTerm())
	}
	e, term, err := l.join(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		log := l.log.Debug
		if apierrors.IsForbidden(err) {
			log = l.log.Warn // the account may not delete (or create) Leases
		}
		log("cannot join the candidates' queue; every release will wake this candidate", "lease", l.name, "error", oneLine(err.Error()))
		return l.campaign(ctx, term)
	}
	qctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		l.keepEntry(qctx, e)
	}()
	defer func() {
		stop()
		wg.Wait()
		l.dequeue(e)
	}()
	if err := l.waitTurn(ctx, e); err != nil {
		return nil, err
	}
	return l.campaign(ctx, term)
}

// campaign is Acquire for the head of the queue (or a candidate without
// one): the Lease alone decides.
//
// Once it has seen a leaderrun holder, the Lease is free for it only when
// that holder's own release freed it (kubewire.AnnReleased names its
// term). A Lease deleted, emptied, stripped of its annotations or with its
// TTL lowered by someone else is that holder gone silent: it is waited out
// on our clock, counted from when we first saw each such version, with the
// longest TTL the holder declared in its term — never a lowered one
// (DESIGN §1.12, "A record edited by hand").
func (l *Locker) campaign(ctx context.Context, term string) (locker.Lease, error) {
	var seen observe.Watch
	var w watch.Interface
	defer func() {
		if w != nil {
			w.Stop()
		}
	}()
	firstVersion, warned, silent := "", false, false
	var live liveHolder

	cur, err := l.get(ctx)
	for {
		if err != nil {
			return nil, err
		}
		if l.onObserve != nil {
			l.onObserve()
		}
		var wait time.Duration = -1 // -1: until the Lease changes
		holder := holderOf(cur)
		ttl, contract := declaredTTL(orEmpty(cur))
		if holder != "" && contract && termOf(cur) != "" && termOf(cur) != live.term {
			// A new leaderrun holder.
			live = liveHolder{term: termOf(cur), id: holder, ttl: ttl}
			seen.Reset()
			silent = false
		}
		switch {
		case live.term != "" && live.silentIn(cur):
			// Deleted, freed, or edited by hand: not the holder's release.
			if !silent {
				silent = true
				l.log.Info("the Lease was deleted or changed without the holder's release; waiting the holder out as a silent one",
					"lease", l.namespace+"/"+l.name, "holder", live.id, "ttl", live.ttl, "deleted", cur == nil)
			}
			if l.opts.NoWait {
				return nil, fmt.Errorf("kubernetes: %w: Lease %s/%s was changed by hand while %q held it", locker.ErrHeld, l.namespace, l.name, live.id)
			}
			version := "deleted"
			if cur != nil {
				version = cur.ResourceVersion
			}
			seen.Observe(version, live.ttl)
			_, left, _ := seen.Due()
			if left > 0 {
				wait = left
				break
			}
			l.log.Info("silent holder is past its TTL; taking the Lease", "holder", live.id, "unchanged_for", live.ttl+observe.Allowance(live.ttl)-left)
			ls, err := l.take(ctx, cur, term)
			if ls != nil || !errors.Is(err, errCandidacyLost) {
				return ls, err
			}
		case cur == nil || holder == "":
			seen.Reset()
			ls, err := l.take(ctx, cur, term)
			if ls != nil || !errors.Is(err, errCandidacyLost) {
				return ls, err
			}
		case !contract:
			seen.Reset()
			if l.opts.NoWait {
				return nil, fmt.Errorf("kubernetes: %w: Lease %s/%s held by %q", locker.ErrHeld, l.namespace, l.name, holder)
			}
			if !warned {
				l.log.Warn("the Lease is held by a holder that does not follow leaderrun's observer-clock contract; waiting until it is released or deleted",
					"lease", l.namespace+"/"+l.name, "holder", holder)
				warned = true
			}
		default:
			ttl = live.longest(cur, ttl)
			seen.Observe(cur.ResourceVersion, ttl)
			_, left, _ := seen.Due()
			if l.opts.NoWait {
				if firstVersion == "" {
					firstVersion = cur.ResourceVersion
				}
				if firstVersion != cur.ResourceVersion || looksAlive(cur, ttl) {
					return nil, fmt.Errorf("kubernetes: %w: Lease %s/%s held by %q", locker.ErrHeld, l.namespace, l.name, holder)
				}
			}
			if left <= 0 {
				l.log.Info("holder stopped renewing; taking over", "holder", holder, "unchanged_for", ttl+observe.Allowance(ttl)-left)
				ls, err := l.take(ctx, cur, term)
				if ls != nil || !errors.Is(err, errCandidacyLost) {
					return ls, err
				}
			} else {
				wait = left
			}
		}

		// Wait for the Lease to change, or for the holder to become due.
		if w == nil {
			rv := ""
			if cur != nil {
				rv = cur.ResourceVersion
			}
			if w, err = l.watch(ctx, rv); err != nil {
				return nil, err
			}
		}
		cur, w, err = l.next(ctx, cur, w, wait)
	}
}

// liveHolder is the last leaderrun holder a candidate saw hold the Lease:
// its term, holderIdentity, and the longest TTL it declared in that term.
type liveHolder struct {
	term string
	id   string
	ttl  time.Duration
}

// silentIn reports whether the Lease as read shows the live holder gone
// silent rather than released or replaced: deleted; free without its
// release's marker; still naming its term or its holderIdentity, but no
// longer declaring the contract (annotations removed, a TTL lowered is
// handled by longest). A Lease held under another term, with the
// contract, is a new holder, which the caller has already taken up.
func (h liveHolder) silentIn(ls *coordinationv1.Lease) bool {
	if ls == nil {
		return true
	}
	holder := holderOf(ls)
	if holder == "" {
		return ls.Annotations[annReleased] != h.term
	}
	if _, contract := declaredTTL(ls); contract && termOf(ls) == h.term {
		return false
	}
	return termOf(ls) == h.term || (termOf(ls) == "" && holder == h.id)
}

// longest is the TTL to wait a holder out with: the longest it declared
// in its term, so that a TTL lowered by hand never shortens the wait. It
// remembers ttl, what ls declares now.
func (h *liveHolder) longest(ls *coordinationv1.Lease, ttl time.Duration) time.Duration {
	if termOf(ls) == h.term {
		h.ttl = max(h.ttl, ttl)
		return h.ttl
	}
	return ttl
}

// next waits for the next event of watch w on the Lease, or for wait (if not
// negative) to pass, or for ctx to end, and returns the Lease as it now is.
// A watch that ends or reports an error is replaced by a fresh read (nil w:
// the caller opens a new watch).
func (l *Locker) next(ctx context.Context, cur *coordinationv1.Lease, w watch.Interface, wait time.Duration) (*coordinationv1.Lease, watch.Interface, error) {
	var timer <-chan time.Time
	if wait >= 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timer = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil, w, ctx.Err()
		case <-timer:
			return cur, w, nil
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type == watch.Error {
				w.Stop()
				if ok {
					l.log.Debug("watch failed; reading the Lease again", "error", apierrors.FromObject(ev.Object))
				}
				fresh, err := l.getRetrying(ctx)
				return fresh, nil, err
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				if ls, isLease := ev.Object.(*coordinationv1.Lease); isLease && ls.Name == l.name {
					return ls, w, nil
				}
			case watch.Deleted:
				return nil, w, nil
			}
		}
	}
}

// take writes our claim over cur (create when nil), conditioned on cur's
// resourceVersion. It returns errCandidacyLost (wrapped) when someone else
// wrote first.
func (l *Locker) take(ctx context.Context, cur *coordinationv1.Lease, term string) (locker.Lease, error) {
	l.attempts.Add(1)
	cctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	claim := l.claim(cur, term)
	var got *coordinationv1.Lease
	var err error
	verb := "update"
	if cur == nil {
		verb = "create"
		got, err = l.client.Create(cctx, claim, metav1.CreateOptions{})
	} else {
		got, err = l.client.Update(cctx, claim, metav1.UpdateOptions{})
	}
	switch {
	case apierrors.IsConflict(err), apierrors.IsAlreadyExists(err), apierrors.IsNotFound(err):
		return nil, fmt.Errorf("kubernetes: %w: %s", errCandidacyLost, oneLine(err.Error()))
	case err != nil:
		if ctx.Err() != nil {
			l.withdraw(term)
			return nil, ctx.Err()
		}
		return nil, l.classify(verb, err)
	}
	epoch, err := epochOf(got.ResourceVersion)
	if err == nil {
		if prev := parseEpoch(claim.Annotations[annPrevious]); prev >= epoch {
			err = fmt.Errorf("the new epoch %d is not greater than the previous holder's %d: the server's resourceVersion does not increase", epoch, prev)
		}
	}
	if err != nil {
		// Give the Lease back at once: we cannot lead with a safe epoch.
		rctx, rcancel := context.WithTimeout(context.Background(), l.timeout)
		defer rcancel()
		_, _ = l.client.Update(rctx, released(got, term), metav1.UpdateOptions{})
		return nil, fmt.Errorf("kubernetes: %w: %v", locker.ErrRefused, err)
	}
	return newLease(l, got, epoch, term), nil
}

// withdraw gives back a claim whose write was cut short by the caller's
// context: the write may have landed, and a claim nobody renews would hold
// the Lease for a whole TTL (a --holders candidate cancels its other
// slots' attempts the moment it wins one, DESIGN §1.15). Only a Lease that
// still carries our term is released, conditioned on what was read.
func (l *Locker) withdraw(term string) {
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	defer cancel()
	cur, err := l.get(ctx)
	if err != nil || cur == nil || termOf(cur) != term {
		return
	}
	if _, err := l.client.Update(ctx, released(cur, term), metav1.UpdateOptions{}); err != nil {
		l.log.Debug("withdrawing a claim cut short failed; it expires on its own", "lease", l.name, "error", oneLine(err.Error()))
		return
	}
	l.log.Debug("withdrew a claim whose write was cut short", "lease", l.name)
}

// looksAlive reports whether a holder's renewTime, by our wall clock, is
// within its TTL plus the allowance. Clocks of different hosts may differ,
// so this only ever decides to give up (NoWait), never to take over.
func looksAlive(ls *coordinationv1.Lease, ttl time.Duration) bool {
	if ls.Spec.RenewTime == nil {
		return false
	}
	return time.Since(ls.Spec.RenewTime.Time) < ttl+observe.Allowance(ttl)
}

// get reads the Lease; nil when it does not exist.
func (l *Locker) get(ctx context.Context) (*coordinationv1.Lease, error) {
	return l.getNamed(ctx, l.name)
}

// getNamed reads the Lease name of our namespace; nil when it does not
// exist.
func (l *Locker) getNamed(ctx context.Context, name string) (*coordinationv1.Lease, error) {
	cctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	ls, err := l.client.Get(cctx, name, metav1.GetOptions{})
	if apierrors.IsUnauthorized(err) && l.tokenFile {
		// The client has just dropped its cached token; the file may hold
		// a rotated one.
		ls, err = l.client.Get(cctx, name, metav1.GetOptions{})
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, l.classifyLease("get", name, err)
	}
	return ls, nil
}

// getRetrying reads the Lease, retrying failures that are worth retrying
// until ctx ends.
func (l *Locker) getRetrying(ctx context.Context) (*coordinationv1.Lease, error) {
	backoff := retry.Backoff{Min: 100 * time.Millisecond, Max: 2 * time.Second}
	for {
		ls, err := l.get(ctx)
		if err == nil || errors.Is(err, locker.ErrRefused) || ctx.Err() != nil {
			return ls, err
		}
		l.log.Debug("reading the Lease failed; retrying", "error", err)
		if !retry.Sleep(ctx, backoff.Next()) {
			return nil, ctx.Err()
		}
	}
}

// watch opens a watch on the Lease from resourceVersion rv ("" when the
// Lease does not exist: from now on). A field selector on the name lets
// RBAC authorise it as a watch of that one Lease.
func (l *Locker) watch(ctx context.Context, rv string) (watch.Interface, error) {
	return l.watchName(ctx, l.name, rv)
}

// watchName is watch of the Lease name.
func (l *Locker) watchName(ctx context.Context, name, rv string) (watch.Interface, error) {
	backoff := retry.Backoff{Min: 100 * time.Millisecond, Max: 2 * time.Second}
	secs := int64(watchTimeout / time.Second)
	for {
		w, err := l.client.Watch(ctx, metav1.ListOptions{
			FieldSelector:   fields.OneTermEqualSelector("metadata.name", name).String(),
			ResourceVersion: rv,
			TimeoutSeconds:  &secs,
		})
		if err == nil {
			return w, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		err = l.classifyLease("watch", name, err)
		if errors.Is(err, locker.ErrRefused) {
			return nil, err
		}
		l.log.Debug("watching the Lease failed; retrying", "error", err)
		if !retry.Sleep(ctx, backoff.Next()) {
			return nil, ctx.Err()
		}
	}
}

func orEmpty(ls *coordinationv1.Lease) *coordinationv1.Lease {
	if ls == nil {
		return &coordinationv1.Lease{}
	}
	return ls
}
