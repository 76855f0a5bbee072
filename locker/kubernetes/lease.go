package kubernetes

import (
	"context"
	"fmt"
	"github.com/leaderrun/leaderrun/locker/kubernetes/kubewire"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/leaderrun/leaderrun/locker"
)

// lease is one leadership of the Lease. It implements locker.Lease. It
// keeps no deadline: the supervisor times every renewal itself (DESIGN
// §1.2).
type lease struct {
	l     *Locker
	epoch uint64
	term  string

	mu       sync.Mutex
	cur      *coordinationv1.Lease // as our last successful write left it
	released bool                  // Release was called: no more writes

	locker.LostSignal
	stopWatch context.CancelFunc
	watchDone chan struct{}
}

var _ locker.Lease = (*lease)(nil)

// newLease starts watching the Lease from our claim's resourceVersion
// before the leadership is handed to the caller.
func newLease(l *Locker, got *coordinationv1.Lease, epoch uint64, term string) *lease {
	ctx, cancel := context.WithCancel(context.Background())
	s := &lease{l: l, epoch: epoch, term: term, cur: got, stopWatch: cancel, watchDone: make(chan struct{})}
	go s.watchLease(ctx, got.ResourceVersion)
	return s
}

// Epoch is the resourceVersion of the write that made us holder.
func (s *lease) Epoch() uint64 { return s.epoch }

// Renew makes one update of the Lease conditioned on the resourceVersion of
// our last successful write, and returns the Lease's duration (the TTL
// rounded up to whole seconds, as every write of ours declares it; the
// supervisor counts only the TTL it asked for). See update for conflicts.
func (s *lease) Renew(ctx context.Context) (time.Duration, error) {
	_, err := s.update(ctx, "renew", func(next *coordinationv1.Lease) {
		now := metav1.NewMicroTime(time.Now())
		next.Spec.RenewTime = &now
		next.Annotations[annEpoch] = strconv.FormatUint(s.epoch, 10)
	})
	if err != nil {
		return 0, err
	}
	return time.Duration(leaseSeconds(s.l.ttl)) * time.Second, nil
}

// update writes change onto the Lease as our last write left it, with an
// update conditioned on that write's resourceVersion. A conflict means
// another write came between: if the Lease still carries our term and our
// declaration unchanged (an earlier update of ours whose answer was lost,
// or an edit by hand of something else) we adopt it and update again;
// otherwise leadership is lost, as it is when the Lease was deleted.
func (s *lease) update(ctx context.Context, op string, change func(*coordinationv1.Lease)) (*coordinationv1.Lease, error) {
	authRetried := false
	for range 3 {
		select {
		case <-s.Lost():
			// Leadership ended; a write must not look like a success (§1.3).
			return nil, fmt.Errorf("kubernetes: %s: %w: %s", op, locker.ErrLost, s.LostReason())
		default:
		}
		s.mu.Lock()
		next, released := s.cur.DeepCopy(), s.released
		s.mu.Unlock()
		if released {
			return nil, fmt.Errorf("kubernetes: %s: %w: the lease was released", op, locker.ErrLost)
		}
		change(next)
		got, err := s.l.client.Update(ctx, next, metav1.UpdateOptions{})
		switch {
		case err == nil:
			s.mu.Lock()
			s.cur = got
			s.mu.Unlock()
			return got, nil
		case apierrors.IsNotFound(err):
			s.markLost("the Lease was deleted")
			return nil, fmt.Errorf("kubernetes: %s: %w: %s", op, locker.ErrLost, s.LostReason())
		case apierrors.IsUnauthorized(err) && s.l.tokenFile && !authRetried:
			// The client has just dropped its cached token; the file may
			// hold a rotated one.
			authRetried = true
			continue
		case !apierrors.IsConflict(err):
			return nil, s.l.classify("update", err)
		}
		fresh, err := s.l.get(ctx)
		if err != nil {
			return nil, err
		}
		if lost := s.check(fresh); lost != "" {
			s.markLost(lost)
			return nil, fmt.Errorf("kubernetes: %s: %w: %s", op, locker.ErrLost, lost)
		}
		s.mu.Lock()
		s.cur = fresh
		s.mu.Unlock()
	}
	return nil, fmt.Errorf("kubernetes: %s lease %s/%s: conflicting writes kept coming", op, s.l.namespace, s.l.name)
}

// check says why ls shows our leadership over; empty while it is ours.
// A Lease that still names us but no longer declares our TTL and contract
// is over too: standbys count by what it declares now, which may be
// shorter than our own deadline (DESIGN §1.12).
func (s *lease) check(ls *coordinationv1.Lease) string {
	switch {
	case ls == nil:
		return "the Lease was deleted"
	case termOf(ls) != s.term:
		if h := holderOf(ls); h != "" {
			return fmt.Sprintf("the Lease was taken over by %q", h)
		}
		return "the Lease was released by someone else"
	}
	return s.l.declarationChanged(ls)
}

func (s *lease) markLost(reason string) {
	if s.Mark(reason) {
		s.l.log.Debug("leadership lost", "lease", s.l.namespace+"/"+s.l.name, "reason", reason)
	}
}

// watchLease reports a loss as soon as the Lease is deleted or names
// another holder. A failed watch is replaced after a fresh read.
func (s *lease) watchLease(ctx context.Context, rv string) {
	defer close(s.watchDone)
	for ctx.Err() == nil {
		w, err := s.l.watch(ctx, rv)
		if err != nil {
			return // ctx ended, or refused: renewals will say so
		}
		rv = s.follow(ctx, w)
		w.Stop()
		if rv == "" {
			return
		}
	}
}

// follow reads events of w until the leadership is lost (returns ""), the
// watch fails (returns the resourceVersion to watch from next), or ctx
// ends.
func (s *lease) follow(ctx context.Context, w watch.Interface) string {
	for {
		select {
		case <-ctx.Done():
			return ""
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type == watch.Error {
				fresh, err := s.l.getRetrying(ctx)
				if err != nil {
					return ""
				}
				if lost := s.check(fresh); lost != "" {
					s.markLost(lost)
					return ""
				}
				return fresh.ResourceVersion
			}
			var ls *coordinationv1.Lease
			switch ev.Type {
			case watch.Added, watch.Modified:
				var isLease bool
				if ls, isLease = ev.Object.(*coordinationv1.Lease); !isLease {
					continue
				}
			case watch.Deleted:
			default:
				continue
			}
			if lost := s.check(ls); lost != "" {
				s.markLost(lost)
				return ""
			}
		}
	}
}

// Handle is kubewire's lease handle; see Locker.ReleaseHandle.
func (s *lease) Handle() string { return kubewire.Handle(s.l.namespace, s.l.name, s.term) }

// Release clears the holder with an update conditioned on our last write,
// bounded by ctx. It stops the watch first, so our own write is not
// reported as a loss.
func (s *lease) Release(ctx context.Context) error {
	s.stopWatch()
	select {
	case <-s.watchDone:
	case <-ctx.Done():
	}
	s.mu.Lock()
	cur := s.cur
	s.released = true
	s.mu.Unlock()
	return s.l.release(ctx, cur, s.term)
}

// release clears the holder of cur if its term is still term, with the
// marker of term's own release (kubewire.AnnReleased), retrying when
// another write came between. Its callers have seen the job gone (DESIGN
// §1.4). A Lease changed by hand gets the marker too, so that a standby
// waiting term out as a silent holder takes it now: one whose holder was
// cleared is marked (kubewire.Marks), one deleted is created again,
// released, unless someone created it first.
func (l *Locker) release(ctx context.Context, cur *coordinationv1.Lease, term string) error {
	last := cur
	for range 3 {
		var err error
		verb := "update"
		switch {
		case cur == nil:
			verb = "create"
			_, err = l.client.Create(ctx, l.releasedAnew(last, term), metav1.CreateOptions{})
			if err == nil {
				l.log.Debug("the Lease was deleted; created it again, released", "lease", l.namespace+"/"+l.name)
			}
		case !kubewire.Marks(holderOf(cur), cur.Annotations, term):
			return nil // not ours any more: nothing to give back
		default:
			_, err = l.client.Update(ctx, released(cur, term), metav1.UpdateOptions{})
		}
		switch {
		case err == nil:
			return nil
		case apierrors.IsNotFound(err):
			cur = nil
			continue
		case !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err):
			return l.classify(verb, err)
		}
		if cur, err = l.get(ctx); err != nil {
			return err
		}
	}
	return fmt.Errorf("kubernetes: release lease %s/%s: conflicting writes kept coming", l.namespace, l.name)
}

// ReleaseHandle clears the holder of the Lease if it still belongs to the
// leadership the handle names (see lease.Handle).
func (l *Locker) ReleaseHandle(ctx context.Context, handle string) error {
	ns, name, term, err := kubewire.ParseHandle(handle)
	if err != nil || ns != l.namespace || name != l.name {
		return fmt.Errorf("kubernetes: %w: %q is not a handle for Lease %s/%s", locker.ErrRefused, handle, l.namespace, l.name)
	}
	cur, err := l.get(ctx)
	if err != nil {
		return err
	}
	return l.release(ctx, cur, term)
}
