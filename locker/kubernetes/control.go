package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/leaderrun/leaderrun/internal/retry"
	"github.com/leaderrun/leaderrun/locker"
)

// A key's control record (locker.Controls) lives on a Lease of its own,
// <prefix>.<key>.control, in the control annotation (the record's JSON),
// shared by the key's slot keys (locker.ControlKey: a Locker of "jobs~2"
// uses the Lease of "jobs"). Its version is the Lease's resourceVersion.
// The name is no other Lease's: a key's Lease has exactly one '.'
// (LeaseName), a history Lease ends in ".history", a queue entry has the
// infix ".q." and a 24-digit hex term. The Lease has no holder, so it never
// looks held, and no queue label, so the queue's listing never sees it.
// Like the history Lease it never touches the leadership Lease, whose
// resourceVersion the holder's conditional renewals and the epoch depend on.
//
// A write is a create (no version: AlreadyExists is a conflict) or a get
// and an update conditioned on the version (Conflict is a conflict).
// Control is a get, which kube-apiserver serves from etcd with a quorum
// read. WaitControl watches that one Lease by a field selector on its
// name, from the resourceVersion it read: idle, one open watch stream,
// which the server ends every watchTimeout and WaitControl reads again and
// re-opens. The verbs are those campaigning needs already (get, create,
// update, watch).

// annControl holds the key's control record on its control Lease.
const annControl = annPrefix + "control"

// controlSuffix makes a Lease name no key, history or queue entry maps to.
const controlSuffix = ".control"

var _ locker.Controls = (*Locker)(nil)

// controlName is the name of the key's control Lease.
func (l *Locker) controlName() (string, error) {
	base, err := LeaseName(l.opts.Prefix, locker.ControlKey(l.opts.Key))
	if err != nil {
		return "", fmt.Errorf("kubernetes: %w: %v", locker.ErrRefused, err)
	}
	name := base + controlSuffix
	if len(name) > maxNameLength {
		return "", fmt.Errorf("kubernetes: %w: the control Lease %s of key %q would have %d characters; Kubernetes allows %d",
			locker.ErrRefused, name, locker.ControlKey(l.opts.Key), len(name), maxNameLength)
	}
	return name, nil
}

// controlOf decodes the record of a control Lease; nil is no record.
func controlOf(ls *coordinationv1.Lease) (locker.Control, error) {
	if ls == nil {
		return locker.Control{}, nil
	}
	c, err := locker.ParseControl([]byte(ls.Annotations[annControl]), ls.ResourceVersion)
	if err != nil {
		return locker.Control{}, fmt.Errorf("kubernetes: Lease %s/%s, annotation %s: %w", ls.Namespace, ls.Name, annControl, err)
	}
	return c, nil
}

// Control reads the key's control Lease (a quorum read).
func (l *Locker) Control(ctx context.Context) (locker.Control, error) {
	name, err := l.controlName()
	if err != nil {
		return locker.Control{}, err
	}
	ls, err := l.getNamed(ctx, name)
	if err != nil {
		return locker.Control{}, err
	}
	return controlOf(ls)
}

// SetControl creates the control Lease (c.Version empty) or updates it
// conditioned on c.Version; see locker.Controls.
func (l *Locker) SetControl(ctx context.Context, c locker.Control) (string, error) {
	name, err := l.controlName()
	if err != nil {
		return "", err
	}
	conflict := func() (string, error) {
		return "", fmt.Errorf("kubernetes: write the control Lease %s/%s: %w", l.namespace, name, locker.ErrConflict)
	}
	var next *coordinationv1.Lease
	if c.Version == "" {
		next = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: l.namespace}}
	} else {
		// Read first so that what others added to the object (labels,
		// annotations) stays; the update is conditioned on c.Version all
		// the same.
		cur, err := l.getNamed(ctx, name)
		if err != nil {
			return "", err
		}
		if cur == nil || cur.ResourceVersion != c.Version {
			return conflict()
		}
		next = cur.DeepCopy()
	}
	if next.Annotations == nil {
		next.Annotations = map[string]string{}
	}
	next.Annotations[annKey] = locker.ControlKey(l.opts.Key)
	next.Annotations[annControl] = string(c.Record())
	cctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	verb := "create"
	var got *coordinationv1.Lease
	if c.Version == "" {
		got, err = l.client.Create(cctx, next, metav1.CreateOptions{})
	} else {
		verb = "update"
		got, err = l.client.Update(cctx, next, metav1.UpdateOptions{})
	}
	switch {
	case err == nil:
		return got.ResourceVersion, nil
	case apierrors.IsAlreadyExists(err), apierrors.IsConflict(err), apierrors.IsNotFound(err):
		return conflict()
	case ctx.Err() != nil:
		return "", ctx.Err()
	}
	return "", l.classifyLease(verb, name, err)
}

// WaitControl returns the record once its version differs from version;
// see locker.Controls. It reads the Lease, then watches it from what it
// read; a watch that ends (the server's timeout, 410 Gone, a broken
// connection) is followed by a fresh read and a new watch. Failed reads
// are retried until ctx ends, except refusals.
func (l *Locker) WaitControl(ctx context.Context, version string) (locker.Control, error) {
	name, err := l.controlName()
	if err != nil {
		return locker.Control{}, err
	}
	backoff := retry.Backoff{Min: 100 * time.Millisecond, Max: 2 * time.Second}
	for {
		ls, err := l.getNamed(ctx, name)
		if err == nil {
			c, perr := controlOf(ls)
			switch {
			case perr != nil:
				return locker.Control{}, perr
			case c.Version != version:
				return c, nil
			}
			// From the version read; with no Lease, from now on, which
			// also reports a Lease created after the read.
			var changed bool
			watched := time.Now()
			if c, changed, err = l.followControl(ctx, name, c.Version, version); changed {
				return c, err
			}
			if err == nil && time.Since(watched) < time.Second {
				// A watch that ends at once, again and again, must not
				// make a busy loop of reads.
				err = errWatchEnded
			}
		}
		switch {
		case ctx.Err() != nil:
			return locker.Control{}, ctx.Err()
		case errors.Is(err, locker.ErrRefused):
			return locker.Control{}, err
		case err != nil:
			l.log.Debug("reading the control Lease failed; retrying", "lease", name, "error", oneLine(err.Error()))
			if !retry.Sleep(ctx, backoff.Next()) {
				return locker.Control{}, ctx.Err()
			}
		default:
			backoff.Reset()
		}
	}
}

// followControl watches the control Lease from rv until it shows a record
// whose version differs from version (changed), or the watch ends (not
// changed, nil: read again), or ctx ends.
func (l *Locker) followControl(ctx context.Context, name, rv, version string) (c locker.Control, changed bool, err error) {
	w, err := l.watchName(ctx, name, rv)
	if err != nil {
		return locker.Control{}, false, err
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return locker.Control{}, false, ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type == watch.Error {
				return locker.Control{}, false, nil
			}
			ls, isLease := ev.Object.(*coordinationv1.Lease)
			if !isLease || ls.Name != name {
				continue // a bookmark, or not ours
			}
			switch ev.Type {
			case watch.Deleted:
				ls = nil // deleted by hand: no record
			case watch.Added, watch.Modified:
			default:
				continue
			}
			c, err := controlOf(ls)
			if err != nil {
				return locker.Control{}, true, err
			}
			if c.Version != version {
				return c, true, nil
			}
		}
	}
}
