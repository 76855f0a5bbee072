package etcd

import (
	"context"
	"errors"
	"fmt"
	"github.com/leaderrun/leaderrun/locker/etcd/etcdwire"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leaderrun/leaderrun/locker"
)

// lease is one etcd leadership: our lease and the election key attached to
// it. It implements locker.Lease. It keeps no deadline: the supervisor times
// every renewal itself (DESIGN §1.2).
type lease struct {
	cli     *clientv3.Client
	id      clientv3.LeaseID
	k       *keeper
	key     string
	rev     int64 // CreateRevision of key, the epoch
	timeout time.Duration
	log     hclog.Logger

	locker.LostSignal

	stopWatch context.CancelFunc
	watchDone chan struct{}

	confirmed  *renewalAnswer // verify's renewal, until Confirmation takes it
	control    *controlRead   // the control record verify read, until ControlAtWin takes it
	controlKey string
}

// controlRead is the control record as a read found it: its value and
// version (its ModRevision, as the records store gives it), ok false when
// there was none.
type controlRead struct {
	value   []byte
	version string
	ok      bool
}

// renewalAnswer is a renewal's send time and what etcd granted.
type renewalAnswer struct {
	sent    time.Time
	granted time.Duration
}

var (
	_ locker.Lease        = (*lease)(nil)
	_ locker.Confirmed    = (*lease)(nil)
	_ locker.ControlAtWin = (*lease)(nil)
)

// ControlAtWin hands over the control record verify read in the
// transaction that found us leading, once.
func (s *lease) ControlAtWin() (locker.Control, bool, error) {
	r := s.control
	s.control = nil
	if r == nil {
		return locker.Control{}, false, nil
	}
	if !r.ok {
		return locker.Control{}, true, nil
	}
	c, err := locker.ParseControl(r.value, r.version)
	if err != nil {
		return locker.Control{}, true, fmt.Errorf("etcd: control record %s: %w", s.controlKey, err)
	}
	return c, true, nil
}

// Confirmation hands over the renewal verify sent beside its transaction,
// once.
func (s *lease) Confirmation() (time.Time, time.Duration, bool) {
	c := s.confirmed
	s.confirmed = nil
	if c == nil {
		return time.Time{}, 0, false
	}
	return c.sent, c.granted, true
}

// newLease starts watching our key from the revision after seen, at which
// verify found it ours, before the lease is handed to the caller.
func newLease(c *candidate, seen int64) *lease {
	ctx, cancel := context.WithCancel(context.Background())
	s := &lease{
		cli:        c.cli,
		id:         c.id,
		k:          c.k,
		key:        c.key,
		rev:        c.rev,
		timeout:    c.l.timeout,
		log:        c.l.log,
		stopWatch:  cancel,
		watchDone:  make(chan struct{}),
		controlKey: c.l.controlKey(),
	}
	go s.watchKey(ctx, seen+1)
	return s
}

// Epoch is the CreateRevision of our election key: etcd's revision only
// grows, so it exceeds every epoch granted before, even across deletions of
// the whole prefix (DESIGN §1.1).
func (s *lease) Epoch() uint64 { return uint64(s.rev) }

// Renew makes one LeaseKeepAlive round trip bounded by ctx (see keeper) and
// returns the TTL etcd granted. A lease etcd no longer knows is lost for good.
func (s *lease) Renew(ctx context.Context) (time.Duration, error) {
	select {
	case <-s.Lost():
		// Leadership ended; a renewal must not look like a success (§1.3).
		return 0, fmt.Errorf("etcd: renew lease %x: %w: %s", s.id, locker.ErrLost, s.LostReason())
	default:
	}
	ttl, err := s.k.renew(ctx)
	if err != nil {
		if leaseGone(err) {
			s.markLost(fmt.Sprintf("lease %x expired or was revoked", s.id))
			return 0, fmt.Errorf("etcd: renew lease %x: %w: %w", s.id, locker.ErrLost, err)
		}
		return 0, classify(fmt.Sprintf("etcd: renew lease %x", s.id), err)
	}
	return time.Duration(ttl) * time.Second, nil
}

func (s *lease) markLost(reason string) {
	if s.Mark(reason) {
		s.log.Debug("leadership lost", "key", s.key, "reason", reason)
	}
}

// Handle is etcdwire's lease handle; see Locker.ReleaseHandle.
func (s *lease) Handle() string { return etcdwire.Handle(int64(s.id), s.key) }

// parseHandle undoes Handle, accepting only handles for keys under dir.
func parseHandle(handle, dir string) (clientv3.LeaseID, error) {
	id, key, err := etcdwire.ParseHandle(handle)
	if err != nil || key != dir+fmt.Sprintf("%x", id) {
		return 0, fmt.Errorf("etcd: %w: %q is not a lease handle for %s", locker.ErrRefused, handle, strings.TrimSuffix(dir, "@"))
	}
	return clientv3.LeaseID(id), nil
}

// Release revokes our lease, which deletes our election key in the same
// revision, then deletes the key if it survived (written over without our
// lease by hand), bounded by ctx. It stops the watch first, so our own
// delete is not reported as a loss. The revocation comes first because it
// is what a waiting candidate takes for our release: it wakes on the
// deletion and leads only once our lease is gone (candidate.awaitLeaseEnd),
// so that a key deleted by hand, whose lease lives on, cannot pass for a
// release (DESIGN §1.7, "Hand edits"). The caller releases only after the job
// is gone.
func (s *lease) Release(ctx context.Context) error {
	s.k.close()
	s.stopWatch()
	select {
	case <-s.watchDone:
	case <-ctx.Done():
	}
	var errs []error
	if _, err := s.cli.Revoke(ctx, s.id); err != nil && !leaseGone(err) {
		errs = append(errs, classify(fmt.Sprintf("etcd: revoke lease %x", s.id), err))
	}
	// Delete only the key we created, and only if the revocation did not.
	_, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(s.key), "=", s.rev)).
		Then(clientv3.OpDelete(s.key)).
		Commit()
	if err != nil {
		errs = append(errs, classify("etcd: delete election key "+s.key, err))
	}
	return errors.Join(errs...)
}
