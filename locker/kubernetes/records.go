package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/leaderrun/leaderrun/internal/retry"
	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/records"
)

// The key's records (package records) are annotations on Leases:
//
//   - the control record lives on a Lease of its own,
//     <prefix>.<key>.control, in the control annotation (the record's
//     JSON), shared by the key's slot keys (locker.Options.Key: a Locker
//     of "jobs~2" uses the Lease of "jobs"). Its version is the Lease's
//     resourceVersion. A write is a create (no version: AlreadyExists is
//     a conflict) or a get and an update conditioned on the version
//     (Conflict is a conflict). WaitControl watches that one Lease by a
//     field selector on its name, from the resourceVersion it read: idle,
//     one open watch stream, which the server ends every watchTimeout;
//   - the history lives on a Lease of its own, <prefix>.<key>.history, in
//     the terms annotation: a JSON array of locker.Term, newest first, at
//     most keep of them. Each record is one get and one update (create
//     the first time) that writes the term and cuts the array to keep at
//     once, conditioned on the resourceVersion read, retried on a
//     conflict;
//   - the run records live on the leadership Lease itself, in the runs
//     annotation: a JSON object from slot to locker.Run, written with an
//     update conditioned on our leadership's last write (so only while we
//     lead: ErrLost otherwise), which drops expired records in the same
//     write. They live as long as the Lease.
//
// The control and history Leases' names are no other Lease's: a key's
// Lease has exactly one '.' (LeaseName), a queue entry has the infix
// ".q." and a 24-digit hex term. They have no holder, so they never look
// held, and no queue label, so the queue's listing never sees them. They
// never touch the leadership Lease, whose resourceVersion the holder's
// conditional renewals and the epoch depend on. Reads are gets, which
// kube-apiserver serves from etcd with a quorum read. The verbs are those
// campaigning needs already (get, create, update, watch).

const (
	// annControl holds the key's control record on its control Lease.
	annControl = annPrefix + "control"
	// annTerms holds the key's term records on its history Lease.
	annTerms = annPrefix + "terms"
	// annRuns holds the once-per records of the key on the Lease itself.
	annRuns = annPrefix + "runs"
	// controlSuffix and historySuffix make Lease names no key, history or
	// queue entry maps to.
	controlSuffix = ".control"
	historySuffix = ".history"
	// maxWriteAttempts bounds a history record's read-and-write rounds.
	maxWriteAttempts = 8
)

// store is the Locker's records.Store.
type store struct{ l *Locker }

var (
	_ records.Waiter      = store{}
	_ records.Expiring    = store{}
	_ records.TermBatcher = store{}
)

// newRecords builds the Locker's records core.
func newRecords(l *Locker) *records.Core {
	return records.New(records.Config{Store: store{l}, Name: "kubernetes", Key: l.opts.Key, Log: l.log})
}

// controlName is the name of the key's control Lease.
func (l *Locker) controlName() (string, error) {
	base, err := LeaseName(l.opts.Prefix, l.opts.Key)
	if err != nil {
		return "", fmt.Errorf("kubernetes: %w: %v", locker.ErrRefused, err)
	}
	name := base + controlSuffix
	if len(name) > maxNameLength {
		return "", fmt.Errorf("kubernetes: %w: the control Lease %s of key %q would have %d characters; Kubernetes allows %d",
			locker.ErrRefused, name, l.opts.Key, len(name), maxNameLength)
	}
	return name, nil
}

// historyName is the name of the key's history Lease.
func (l *Locker) historyName() (string, error) {
	name := l.name + historySuffix
	if len(name) > maxNameLength {
		return "", fmt.Errorf("kubernetes: %w: the history Lease %s of key %q would have %d characters; Kubernetes allows %d",
			locker.ErrRefused, name, l.opts.Name(), len(name), maxNameLength)
	}
	return name, nil
}

// controlOf is the record of a control Lease; nil is no record.
func controlOf(ls *coordinationv1.Lease) ([]byte, string, bool) {
	if ls == nil {
		return nil, "", false
	}
	return []byte(ls.Annotations[annControl]), ls.ResourceVersion, true
}

func (s store) Get(ctx context.Context, kind records.Kind, name string) ([]byte, string, bool, error) {
	switch kind {
	case records.Control:
		lname, err := s.l.controlName()
		if err != nil {
			return nil, "", false, err
		}
		ls, err := s.l.getNamed(ctx, lname)
		if err != nil {
			return nil, "", false, err
		}
		value, v, ok := controlOf(ls)
		return value, v, ok, nil
	}
	entries, err := s.List(ctx, kind, true)
	if err != nil {
		return nil, "", false, err
	}
	for _, e := range entries {
		if e.Name == name {
			return e.Value, "", true, nil
		}
	}
	return nil, "", false, nil
}

// Swap creates the control Lease (prev empty) or updates it conditioned
// on prev.
func (s store) Swap(ctx context.Context, _ records.Kind, _, prev string, value []byte) (string, error) {
	l := s.l
	name, err := l.controlName()
	if err != nil {
		return "", err
	}
	conflict := func() (string, error) {
		return "", fmt.Errorf("kubernetes: write the control Lease %s/%s: %w", l.namespace, name, locker.ErrConflict)
	}
	var next *coordinationv1.Lease
	if prev == "" {
		next = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: l.namespace}}
	} else {
		// Read first so that what others added to the object (labels,
		// annotations) stays; the update is conditioned on prev all the
		// same.
		cur, err := l.getNamed(ctx, name)
		if err != nil {
			return "", err
		}
		if cur == nil || cur.ResourceVersion != prev {
			return conflict()
		}
		next = cur.DeepCopy()
	}
	if next.Annotations == nil {
		next.Annotations = map[string]string{}
	}
	next.Annotations[annKey] = l.opts.Key
	next.Annotations[annControl] = string(value)
	cctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	verb := "create"
	var got *coordinationv1.Lease
	if prev == "" {
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

// Put adds or replaces one term record, keeping every other.
func (s store) Put(ctx context.Context, _ records.Kind, name string, value []byte) error {
	return s.PutTerm(ctx, name, value, 0)
}

// PutTerm adds or replaces the term record and keeps the newest keep
// (keep <= 0: all) in one write.
func (s store) PutTerm(ctx context.Context, _ string, value []byte, keep int) error {
	term, err := locker.ParseTerm(value)
	if err != nil {
		return fmt.Errorf("kubernetes: record term: %w", err)
	}
	return s.editHistory(ctx, func(terms []locker.Term) []locker.Term {
		all := []locker.Term{term}
		for _, t := range terms {
			if t.Epoch != term.Epoch {
				all = append(all, t)
			}
		}
		return locker.NewestTerms(all, keep)
	})
}

// editHistory applies edit to the history Lease's terms: one get and one
// update (create the first time) conditioned on what it read, again on a
// conflict.
func (s store) editHistory(ctx context.Context, edit func([]locker.Term) []locker.Term) error {
	l := s.l
	name, err := l.historyName()
	if err != nil {
		return err
	}
	backoff := retry.Backoff{Min: 20 * time.Millisecond, Max: 500 * time.Millisecond}
	for attempt := 0; ; attempt++ {
		cur, err := l.getNamed(ctx, name)
		if err != nil {
			return err
		}
		next := cur
		if next == nil {
			next = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: l.namespace}}
		}
		if next.Annotations == nil {
			next.Annotations = map[string]string{}
		}
		b, err := json.Marshal(edit(termsOf(next)))
		if err != nil {
			return fmt.Errorf("kubernetes: encode term records: %w", err)
		}
		next.Annotations[annKey] = l.opts.Name()
		next.Annotations[annTerms] = string(b)
		verb := "update"
		cctx, cancel := context.WithTimeout(ctx, l.timeout)
		if cur == nil {
			verb = "create"
			_, err = l.client.Create(cctx, next, metav1.CreateOptions{})
		} else {
			_, err = l.client.Update(cctx, next, metav1.UpdateOptions{})
		}
		cancel()
		if err == nil {
			return nil
		}
		// Another writer came between the read and the write (the guard
		// of the same term, or the next term's holder): read again. Each
		// conflict is another writer's success, so with fewer than
		// maxWriteAttempts writers at once every one of them lands.
		raced := apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err)
		if !raced || attempt == maxWriteAttempts-1 {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return l.classifyLease(verb, name, err)
		}
		if !retry.Sleep(ctx, backoff.Next()) {
			return ctx.Err()
		}
	}
}

// termsOf decodes the terms annotation, dropping what is not a term; a
// missing Lease or annotation gives an empty slice.
func termsOf(ls *coordinationv1.Lease) []locker.Term {
	out := []locker.Term{}
	if ls == nil {
		return out
	}
	var raw []json.RawMessage
	_ = json.Unmarshal([]byte(ls.Annotations[annTerms]), &raw)
	for _, r := range raw {
		if t, err := locker.ParseTerm(r); err == nil {
			out = append(out, t)
		}
	}
	return out
}

// PutHeld stores the run record in the Lease's runs annotation with an
// update conditioned on our leadership's last write, dropping expired
// records in the same write.
func (s store) PutHeld(ctx context.Context, ls locker.Lease, _ records.Kind, name string, value []byte, _ time.Time) error {
	ours, ok := ls.(*lease)
	if !ok || ours.l != s.l {
		return fmt.Errorf("kubernetes: %w: RecordRun needs a lease this Locker acquired", locker.ErrRefused)
	}
	run, err := locker.ParseRun(value)
	if err != nil {
		return fmt.Errorf("kubernetes: record run: %w", err)
	}
	var encodeErr error
	_, err = ours.update(ctx, "record run", func(next *coordinationv1.Lease) {
		runs := runsOf(next)
		now := time.Now()
		for slot, r := range runs {
			if !r.Live(now) {
				delete(runs, slot)
			}
		}
		runs[name] = run
		b, err := json.Marshal(runs)
		if err != nil {
			encodeErr = err
			return
		}
		next.Annotations[annRuns] = string(b)
	})
	if encodeErr != nil {
		return fmt.Errorf("kubernetes: encode run records: %w", encodeErr)
	}
	return err
}

// RunsExpire: RecordRun drops expired records in its own write; nothing
// but the holder's own update may write the leadership Lease.
func (store) RunsExpire() bool { return true }

// runsOf decodes the runs annotation; a missing or unreadable one is empty.
func runsOf(ls *coordinationv1.Lease) map[string]locker.Run {
	runs := map[string]locker.Run{}
	if ls != nil {
		_ = json.Unmarshal([]byte(ls.Annotations[annRuns]), &runs)
	}
	return runs
}

// List reads the history Lease (Term) or the leadership Lease (Run).
func (s store) List(ctx context.Context, kind records.Kind, _ bool) ([]records.Entry, error) {
	var out []records.Entry
	if kind == records.Run {
		ls, err := s.l.get(ctx)
		if err != nil {
			return nil, err
		}
		for slot, r := range runsOf(ls) {
			out = append(out, records.Entry{Name: slot, Value: r.Record()})
		}
		return out, nil
	}
	name, err := s.l.historyName()
	if err != nil {
		return nil, err
	}
	ls, err := s.l.getNamed(ctx, name)
	if err != nil {
		return nil, err
	}
	for _, t := range termsOf(ls) {
		out = append(out, records.Entry{Name: locker.TermName(t.Epoch), Value: t.Record()})
	}
	return out, nil
}

// Delete removes a term record. Run records are only ever dropped by
// RecordRun's own write (RunsExpire).
func (s store) Delete(ctx context.Context, kind records.Kind, name string) error {
	if kind != records.Term {
		return fmt.Errorf("kubernetes: a %s record is removed only by the holder's own write", kind)
	}
	return s.editHistory(ctx, func(terms []locker.Term) []locker.Term {
		out := terms[:0]
		for _, t := range terms {
			if locker.TermName(t.Epoch) != name {
				out = append(out, t)
			}
		}
		return out
	})
}

// WaitControl reads the control Lease, then, while its version is still
// version, watches it from what it read until it shows another version or
// the watch ends (the server's timeout, 410 Gone, a broken connection).
func (s store) WaitControl(ctx context.Context, version string) ([]byte, string, bool, error) {
	l := s.l
	name, err := l.controlName()
	if err != nil {
		return nil, "", false, err
	}
	ls, err := l.getNamed(ctx, name)
	if err != nil {
		return nil, "", false, err
	}
	value, v, ok := controlOf(ls)
	if v != version {
		return value, v, ok, nil
	}
	// From the version read; with no Lease, from now on, which also
	// reports a Lease created after the read.
	w, err := l.watchName(ctx, name, v)
	if err != nil {
		return nil, "", false, err
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, "", false, ctx.Err()
		case ev, open := <-w.ResultChan():
			if !open || ev.Type == watch.Error {
				return value, v, ok, nil // read again
			}
			got, isLease := ev.Object.(*coordinationv1.Lease)
			if !isLease || got.Name != name {
				continue // a bookmark, or not ours
			}
			switch ev.Type {
			case watch.Deleted:
				got = nil // deleted by hand: no record
			case watch.Added, watch.Modified:
			default:
				continue
			}
			if value, nv, ok := controlOf(got); nv != version {
				return value, nv, ok, nil
			}
		}
	}
}
