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
	"github.com/leaderrun/leaderrun/locker/queueplace"
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
// A candidate renews its entry with an update conditioned on its last
// write, and its successor skips and deletes an entry whose
// resourceVersion stayed the same for long enough on the successor's
// clock. How often depends on the place, as on Consul: a candidate that
// knows of at most one live entry ahead of its own (from its own read of
// the queue, or because the entry it follows says it is the head) renews
// every TTL/2, and is skipped after TTL + observe.Allowance(TTL); a deeper
// one renews only every 2 x TTL (a slow beat: Kubernetes has no session
// that would end for a dead candidate, so even a deep entry must show it
// is alive), and is skipped after deepSilence. The number ahead only falls
// (new entries join at the tail), so a candidate that went fast stays
// fast; it writes at once when it learns its place, so that one frozen a
// moment later is still passed after TTL + allowance. Each write says in
// annAhead what its writer knew ("0" the head, "1" right behind it, "?"
// deeper), so its successor judges its silence by the entry alone; an
// entry without it (an older leaderrun) renews every TTL/2. A candidate
// killed or frozen in the queue holds it up for TTL + allowance when it
// was near the head, for deepSilence at most when it was deeper. An entry
// that the server last wrote three times its bound before the queue's
// newest write, by the server's clock (isAncient), is skipped at once:
// the queue decides only who tries first, so a hint may serve here as it
// never may for a takeover. A
// candidate that finds its own entry gone creates a new one, at the tail,
// and counts its place afresh.
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
	// annAhead is how many live entries the entry's writer knew ahead of
	// it: "0" (the head), "1", or "?" (more, or not known yet).
	annAhead = annPrefix + "ahead"
	// entryInfix separates the key's Lease name from the entry's term.
	entryInfix = ".q."
)

// entry is this candidate's place in the queue.
type entry struct {
	name string
	term string

	// place is what the candidate knows of its place (queueplace): waitTurn
	// lowers it; every write declares it.
	place *queueplace.Place
	// kick tells keepEntry that the beat may have changed.
	kick chan struct{}

	write sync.Mutex // one write of the entry at a time
	mu    sync.Mutex
	cur   *coordinationv1.Lease // as our last write left it
	wrote time.Time             // when our last write returned
}

const noSpot = queueplace.Unknown

func newEntry(name, term string) *entry {
	return &entry{name: name, term: term, place: queueplace.New(), kick: make(chan struct{}, 1)}
}

// aheadValue is what annAhead says for n entries known ahead.
func aheadValue(n int64) string {
	if n <= 1 {
		return strconv.FormatInt(n, 10)
	}
	return "?"
}

// entryMode reads what an entry declares: whether its writer renews it
// every TTL/2 (fast), and whether it is the head. An entry without
// annAhead is an older leaderrun's, which renews every TTL/2.
func entryMode(ls *coordinationv1.Lease) (fast, head bool) {
	v, ok := ls.Annotations[annAhead]
	switch {
	case !ok || v == "1":
		return true, false
	case v == "0":
		return true, true
	}
	return false, false
}

// beat is how often the candidate renews its entry.
func (l *Locker) beat(e *entry) time.Duration {
	if e.place.Near() {
		return l.ttl / 2
	}
	return 2 * l.ttl
}

// silence is the TTL an entry's successor observes it with (observe.Watch
// skips it once unchanged for silence + observe.Allowance(silence)): the
// TTL for one that renews every TTL/2, as before; 3 x TTL for a deep one.
//
// A deep candidate on time sends its next write 2 x TTL after its last
// one returned, and the successor saw the version of that last one no
// earlier than it was applied. The 3 x TTL + Allowance(3 x TTL) of
// deepSilence leaves TTL + Allowance(3 x TTL) beyond the beat for the two
// writes' latencies, the watch's delivery and the clocks' rates (a beat of
// 2 x TTL stretched by 2.5% stays well inside it): more than the TTL/2 +
// allowance a fast entry has, so a deep candidate on time is not skipped
// where a near one on the same connection would not be.
func (l *Locker) silence(ls *coordinationv1.Lease) time.Duration {
	if fast, _ := entryMode(ls); fast {
		return l.ttl
	}
	return 3 * l.ttl
}

// deepSilence bounds how long a killed or frozen deep candidate holds up
// the queue.
func (l *Locker) deepSilence() time.Duration {
	return 3*l.ttl + observe.Allowance(3*l.ttl)
}

// ancient is how long an entry must have gone unwritten for it to be
// skipped at once (isAncient): three times its silence bound.
func (l *Locker) ancient(ls *coordinationv1.Lease) time.Duration {
	d := l.silence(ls)
	return 3 * (d + observe.Allowance(d))
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

// lastWrite is the latest written among items: the server's clock at the
// newest write of the queue (ours among them), no later than now.
func lastWrite(items []coordinationv1.Lease) time.Time {
	var t time.Time
	for i := range items {
		if w := written(&items[i]); w.After(t) {
			t = w
		}
	}
	return t
}

// isAncient reports whether ls has gone unwritten for longer than
// l.ancient(ls), judged on the server's clock alone, against last (the
// newest write of the queue): never by the renewTime its candidate wrote,
// whose host's wall clock may be behind ours by any amount, which would
// get a live candidate on time passed over at every move of the queue.
// The server's times are whole seconds, hence the second more. A server
// that keeps no managedFields leaves the renewTime by our wall clock.
func (l *Locker) isAncient(ls *coordinationv1.Lease, last time.Time) bool {
	if w := written(ls); !w.IsZero() && !last.IsZero() {
		return last.Sub(w) > l.ancient(ls)+time.Second
	}
	return ls.Spec.RenewTime == nil || time.Since(ls.Spec.RenewTime.Time) > l.ancient(ls)
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
	e := newEntry(l.name+entryInfix+term, term)
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
		if err == nil || ctx.Err() != nil || !l.queueRetry(ctx, err, &failing) {
			return e, term, err
		}
		l.log.Debug("cannot join the candidates' queue yet; retrying", "lease", l.name, "error", oneLine(err.Error()))
		if !retry.Sleep(ctx, backoff.Next()) {
			return nil, term, ctx.Err()
		}
	}
}

// queueRetry records a failed queue call in run and reports whether it is
// worth another try: queueRetryable, and the run within queueRetryFor and
// half of what ctx has left (an --acquire-timeout, so that a free key is
// still taken in the other half; retry.Run.Again).
func (l *Locker) queueRetry(ctx context.Context, err error, run *retry.Run) bool {
	return queueRetryable(err) && run.Again(ctx, l.queueRetryFor())
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
			Annotations: map[string]string{annAhead: aheadValue(noSpot)},
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
		if err := l.renewEntry(ctx, e); err != nil && ctx.Err() == nil {
			l.log.Debug("renewing the queue entry failed; retrying", "entry", e.name, "error", oneLine(err.Error()))
			t.Reset(l.ttl / 2)
			continue
		}
		t.Reset(l.beat(e))
	}
}

// renewEntry makes one renewal of e, which declares the place its
// candidate knows. A conflict (a write of ours whose answer was lost) is
// read back and the renewal made once more on it.
func (l *Locker) renewEntry(ctx context.Context, e *entry) error {
	e.write.Lock()
	defer e.write.Unlock()
	cctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	e.mu.Lock()
	cur := e.cur
	e.mu.Unlock()
	for try := 0; ; try++ {
		ahead := e.place.Ahead()
		next := cur.DeepCopy()
		if next.Annotations == nil {
			next.Annotations = map[string]string{}
		}
		next.Annotations[annAhead] = aheadValue(ahead)
		now := metav1.NewMicroTime(time.Now())
		next.Spec.RenewTime = &now
		got, err := l.client.Update(cctx, next, metav1.UpdateOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return l.createLocked(ctx, e)
		case apierrors.IsConflict(err) && try == 0:
			if cur, err = l.client.Get(cctx, e.name, metav1.GetOptions{}); err != nil {
				return err
			}
			continue
		case err != nil:
			return err
		}
		l.wrote(e, got, ahead)
		return nil
	}
}

// declare writes the entry at once when the candidate's place near the
// head is news to it, so that its successor judges it by the fast rule
// (and the one after learns its own place) without waiting for the next
// beat: a candidate frozen a moment after it became head, or right behind
// it, is passed over after TTL + allowance.
func (l *Locker) declare(ctx context.Context, e *entry) {
	if _, news := e.place.News(); !news {
		return
	}
	if err := l.renewEntry(ctx, e); err != nil && ctx.Err() == nil {
		l.log.Debug("writing the queue entry's place failed; writing it with the next renewal", "entry", e.name, "error", oneLine(err.Error()))
	}
	select {
	case e.kick <- struct{}{}:
	default:
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
	var failing retry.Run // of failed queue calls
	for {
		cctx, cancel := context.WithTimeout(ctx, l.timeout)
		list, err := l.client.List(cctx, metav1.ListOptions{LabelSelector: labels.Set{labelQueue: l.queueLabel()}.String()})
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if l.queueRetry(ctx, err, &failing) {
				l.log.Debug("reading the candidates' queue failed; retrying", "lease", l.name, "error", oneLine(err.Error()))
				if !retry.Sleep(ctx, backoff.Next()) {
					return ctx.Err()
				}
				continue
			}
			l.log.Debug("cannot read the candidates' queue (the account needs list on leases); campaigning without it", "lease", l.name, "error", oneLine(err.Error()))
			e.place.Lower(0)
			return nil
		}
		var me *coordinationv1.Lease
		var live, dead []*coordinationv1.Lease
		last := lastWrite(list.Items)
		for i := range list.Items {
			it := &list.Items[i]
			if !strings.HasPrefix(it.Name, l.name+entryInfix) {
				continue
			}
			switch {
			case it.Name == e.name:
				me = it
			case skipped[it.Name] == it.ResourceVersion, l.isAncient(it, last):
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
				if l.queueRetry(ctx, err, &failing) {
					l.log.Debug("writing the queue entry again failed; retrying", "lease", l.name, "error", oneLine(err.Error()))
					if !retry.Sleep(ctx, backoff.Next()) {
						return ctx.Err()
					}
					continue
				}
				l.log.Debug("cannot write the queue entry again; campaigning without it", "entry", e.name, "error", oneLine(err.Error()))
				e.place.Lower(0)
				return nil
			}
			continue
		}
		failing.Reset() // read the queue and found ourselves in it
		var before *coordinationv1.Lease
		listed := map[string]*observe.Watch{}
		var n int64 // live entries ahead of ours
		for _, it := range live {
			w := watches[it.Name]
			if w == nil {
				w = &observe.Watch{}
			}
			w.Observe(it.ResourceVersion, l.silence(it))
			listed[it.Name] = w
			if ahead(it, me) {
				n++
				if before == nil || ahead(before, it) {
					before = it
				}
			}
		}
		watches = listed
		e.place.Lower(n)
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
		l.declare(ctx, e)
		if before == nil {
			return nil
		}
		l.log.Debug("queued behind another candidate", "lease", l.name, "ahead", before.Name, "known_ahead", n)
		silent, err := l.follow(ctx, e, before, watches[before.Name])
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
// returns "", nil) or has not changed for its silence bound on our clock
// (it returns the resourceVersion it stayed at): TTL + allowance for an
// entry that declares it renews every TTL/2, deepSilence for a deeper
// one. seen has observed it since it was first read. An entry that says
// it is the head puts ours at most one behind, which e declares at once.
func (l *Locker) follow(ctx context.Context, e *entry, it *coordinationv1.Lease, seen *observe.Watch) (silent string, err error) {
	rv := it.ResourceVersion
	seen.Observe(rv, l.silence(it))
	w, err := l.watchName(ctx, it.Name, rv)
	if err != nil {
		return "", err
	}
	defer w.Stop()
	for {
		if _, head := entryMode(it); head {
			e.place.Lower(1)
			l.declare(ctx, e)
		}
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
				it, rv = ls, ls.ResourceVersion
				seen.Observe(rv, l.silence(ls))
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
