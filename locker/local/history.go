//go:build linux

package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

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
	if err := os.MkdirAll(l.histDir, 0o755); err != nil {
		return fmt.Errorf("record term: %w", err)
	}
	if err := replaceFile(filepath.Join(l.histDir, locker.TermName(term.Epoch)), term.Record()); err != nil {
		return fmt.Errorf("record term %d: %w", term.Epoch, err)
	}
	for _, e := range locker.Pruned(termsIn(l.histDir), keep) {
		_ = os.Remove(filepath.Join(l.histDir, locker.TermName(e)))
	}
	return nil
}

// Terms reads the key's term records, newest first; creates nothing.
func (l *Locker) Terms(ctx context.Context, limit int) ([]locker.Term, error) {
	if _, err := os.Stat(l.histDir); err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("read history: %w", err)
	}
	return locker.NewestTerms(termsIn(l.histDir), limit), nil
}

// termsIn reads the record files in dir; a file that is not a record (a
// temporary file, a torn name) is skipped.
func termsIn(dir string) []locker.Term {
	entries, _ := os.ReadDir(dir)
	out := []locker.Term{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		if t, err := locker.ParseTerm(b); err == nil && locker.TermName(t.Epoch) == e.Name() {
			out = append(out, t)
		}
	}
	return out
}
