package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leaderrun/leaderrun/internal/retry"
	"github.com/leaderrun/leaderrun/locker"
)

// A key's history lives on a Lease of its own, <prefix>.<key>.history,
// in the terms annotation: a JSON array of locker.Term, at most keep of
// them. It never touches the leadership Lease: a record is written after
// the term's release, when another candidate may already hold the key,
// and any write of the leadership Lease changes its resourceVersion,
// which its holder's conditional renewals and the epoch depend on. The
// name cannot be another key's Lease (LeaseName has exactly one '.'), and
// the Lease has no holder, so it never looks held. Each record is one get
// and one update (create the first time), conditioned on the
// resourceVersion read, retried on a conflict. Its verbs are those the
// leadership Lease already needs (get, create, update).

// annTerms holds the key's term records on its history Lease.
const annTerms = annPrefix + "terms"

// historySuffix makes a Lease name no key maps to.
const historySuffix = ".history"

// maxWriteAttempts bounds a record's read-and-write rounds.
const maxWriteAttempts = 8

var _ locker.History = (*Locker)(nil)

// historyName is the name of the key's history Lease.
func (l *Locker) historyName() (string, error) {
	name := l.name + historySuffix
	if len(name) > maxNameLength {
		return "", fmt.Errorf("kubernetes: %w: the history Lease %s of key %q would have %d characters; Kubernetes allows %d",
			locker.ErrRefused, name, l.opts.Key, len(name), maxNameLength)
	}
	return name, nil
}

// RecordTerm replaces the record of term.Epoch in the history Lease, or
// adds it, and keeps the newest keep.
func (l *Locker) RecordTerm(ctx context.Context, term locker.Term, keep int) error {
	if term.Epoch == 0 {
		return fmt.Errorf("kubernetes: record term: epoch 0")
	}
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
		terms := []locker.Term{term}
		for _, t := range termsOf(next) {
			if t.Epoch != term.Epoch {
				terms = append(terms, t)
			}
		}
		if keep <= 0 {
			keep = locker.DefaultHistoryKeep
		}
		terms = locker.NewestTerms(terms, keep)
		b, err := json.Marshal(terms)
		if err != nil {
			return fmt.Errorf("kubernetes: encode term records: %w", err)
		}
		next.Annotations[annKey] = l.opts.Key
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

// Terms reads the history Lease (a quorum read).
func (l *Locker) Terms(ctx context.Context, limit int) ([]locker.Term, error) {
	name, err := l.historyName()
	if err != nil {
		return nil, err
	}
	ls, err := l.getNamed(ctx, name)
	if err != nil {
		return nil, err
	}
	return locker.NewestTerms(termsOf(ls), limit), nil
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
