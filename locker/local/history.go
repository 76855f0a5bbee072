//go:build linux

package local

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/leaderrun/leaderrun/locker"
)

// Term records live in the state directory beside the run records, one
// file per epoch under <state>/<prefix>/<key>~history/, named
// locker.TermName(epoch), written durably like them.

var _ locker.History = (*Locker)(nil)

// RecordTerm durably replaces the record of term.Epoch and removes the
// records beyond the newest keep. It needs no lease.
func (l *Locker) RecordTerm(ctx context.Context, term locker.Term, keep int) error {
	if term.Epoch == 0 {
		return fmt.Errorf("record term: no epoch")
	}
	d, err := l.openRoot(l.stateDir, l.histRel, "StateDir", true)
	if err != nil {
		return fmt.Errorf("record term: %w", err)
	}
	defer d.close()
	if err := d.replace(locker.TermName(term.Epoch), term.Record()); err != nil {
		return fmt.Errorf("record term %d: %w", term.Epoch, err)
	}
	for _, e := range locker.Pruned(termsIn(d), keep) {
		_ = d.remove(locker.TermName(e))
	}
	return nil
}

// Terms reads the key's term records, newest first; creates nothing.
func (l *Locker) Terms(ctx context.Context, limit int) ([]locker.Term, error) {
	d, err := l.openRoot(l.stateDir, l.histRel, "StateDir", false)
	if errors.Is(err, os.ErrNotExist) {
		return []locker.Term{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read history: %w", err)
	}
	defer d.close()
	return locker.NewestTerms(termsIn(d), limit), nil
}

// termsIn reads the record files in d; a file that is not a record (a
// temporary file, a torn name) is skipped.
func termsIn(d *dir) []locker.Term {
	out := []locker.Term{}
	for _, name := range d.names() {
		b, err := d.readFile(name)
		if err != nil {
			continue
		}
		if t, err := locker.ParseTerm(b); err == nil && locker.TermName(t.Epoch) == name {
			out = append(out, t)
		}
	}
	return out
}
