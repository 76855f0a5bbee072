//go:build linux

package local

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
)

// The records lie where, and as, releases before package records kept
// them: the control record wrapped with its version counter in the lock
// directory, term and run records one file each in the state directory.
func TestRecordsLayout(t *testing.T) {
	dir, state := t.TempDir(), t.TempDir()
	lockertest.LayoutContract(t, lockertest.Layout{
		NewLocker: func(t *testing.T, key string) locker.Locker {
			k, slot := lockertest.KeySlot(key)
			l, err := New(Config{Options: locker.Options{Key: k, Slot: slot, Prefix: "leaderrun", ID: "me", TTL: 15 * time.Second}, Dir: dir, StateDir: state})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			return l
		},
		Control: func(key string) string { return filepath.Join(dir, "leaderrun", key+"~control") },
		Term: func(key string, epoch uint64) string {
			return filepath.Join(state, "leaderrun", key+"~history", locker.TermName(epoch))
		},
		Run: func(key, slot string) string { return filepath.Join(state, "leaderrun", key+"~run", slot) },
		Put: func(t *testing.T, place string, value []byte) {
			if strings.HasSuffix(place, "~control") {
				value = append(append([]byte(`{"version":1,"control":`), value...), "}\n"...)
			}
			if err := os.MkdirAll(filepath.Dir(place), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(place, value, 0o600); err != nil {
				t.Fatal(err)
			}
		},
		Get: func(t *testing.T, place string) ([]byte, bool) {
			b, err := os.ReadFile(place)
			if errors.Is(err, os.ErrNotExist) {
				return nil, false
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasSuffix(place, "~control") {
				var f struct {
					Version uint64          `json:"version"`
					Control json.RawMessage `json:"control"`
				}
				if err := json.Unmarshal(b, &f); err != nil || f.Version == 0 || b[len(b)-1] != '\n' {
					t.Fatalf("control file %s = %q: not {\"version\":N,\"control\":...} and a newline", place, b)
				}
				return f.Control, true
			}
			return b, true
		},
	})
}
