//go:build linux

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testcluster"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// controlBackend is a backend for the tests of the control record: a
// run's options for a key, and a way to write the key's record by hand
// on the backend, as someone with the backend's credentials can.
type controlBackend struct {
	args func(key string) []string
	put  func(t *testing.T, key, record string)
}

// localControl is the local backend in a private lock directory; a record
// written by hand is the control file, renamed into place.
func localControl(t *testing.T) controlBackend {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "leaderrun"), 0o755); err != nil {
		t.Fatal(err)
	}
	return controlBackend{
		args: func(key string) []string { return localArgs(dir, key) },
		put: func(t *testing.T, key, record string) {
			t.Helper()
			path := filepath.Join(dir, "leaderrun", key+"~control")
			v := time.Now().UnixNano() // a version no write made yet
			tmp := testsupport.WriteFile(t, path+".byhand", fmt.Sprintf(`{"version":%d,"control":%s}`, v, record), 0o644)
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
		},
	}
}

// etcdControl is a one-member etcd; a record written by hand is a put of
// the key's control key.
func etcdControl(t *testing.T) controlBackend {
	eps := testcluster.StartEtcd(t, 1).Endpoints()
	cli := etcdClient(t, eps)
	return controlBackend{
		args: func(key string) []string { return etcdArgs(eps, key) },
		put: func(t *testing.T, key, record string) {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := cli.Put(ctx, "/leaderrun/"+key+"/~control", record); err != nil {
				t.Fatal(err)
			}
		},
	}
}

func TestControlReservationBoundLocal(t *testing.T) {
	t.Parallel()
	reservationBound(t, localControl(t))
}

func TestControlReservationBoundEtcd(t *testing.T) {
	t.Parallel()
	reservationBound(t, etcdControl(t))
}

// reservationBound: a step-down cannot keep a key from its candidates
// beyond locker.MaxReservation. step-down --timeout above it is bad input
// (125, one line, nothing written); a record written by hand with an
// until in year 9999 neither holds a candidate back nor makes a holder
// step down; and resume clears a reservation for a candidate that never
// comes, after which a candidate takes the key.
func reservationBound(t *testing.T, b controlBackend) {
	key, mark, env := markedKey("bound")
	q := queryArgs(b.args(key))
	run := func(id string) *Proc {
		return start(t, id, env, withCommand(append(b.args(key), "--id", id), "exec sleep 1000")...)
	}
	leads := func(what string) (string, uint64) {
		t.Helper()
		var id string
		var e uint64
		waitFor(t, 30*time.Second, what, func() bool { id, e = leaderChild(mark); return id != "" })
		return id, e
	}
	forever := time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)

	// A record from before any candidate ran keeps the key for a ghost
	// until year 9999: void, the first candidate leads.
	b.put(t, key, controlRecord(key, 1, "ghost", forever))
	a := run("a")
	first, e1 := leads("a leading despite a reservation until 9999")

	// step-down --timeout of ten years: refused, nothing written, the
	// holder leads on.
	code, _, errOut, _ := runOnce(t, nil, append([]string{"step-down", "--to", "ghost", "--timeout", "87600h"}, q...)...)
	if code != 125 || strings.Count(strings.TrimSpace(errOut), "\n") != 0 || !strings.Contains(errOut, "--timeout") || !strings.Contains(errOut, "1h") {
		t.Errorf("step-down --timeout 87600h: exit %d, %q; want 125 and one line naming --timeout and its bound", code, errOut)
	}

	// A hand-written step-down of the current term to a ghost until year
	// 9999 asks nothing: the holder keeps its term.
	b.put(t, key, controlRecord(key, e1, "ghost", forever))
	time.Sleep(3 * time.Second)
	if id, e := leaderChild(mark); id != first || e != e1 {
		t.Errorf("after a step-down until 9999, %q leads with epoch %d; %s had %d and should lead on", id, e, first, e1)
	}
	_, out, _, _ := runOnce(t, nil, append([]string{"status"}, q...)...)
	if !strings.Contains(out, "ghost") || !strings.Contains(out, "void") {
		t.Errorf("status does not show the void reservation:\n%s", out)
	}

	// A reservation within the bound, for a candidate that never comes:
	// the holder steps down and nobody leads, until resume clears it.
	bb := run("b")
	sd := start(t, "step-down", nil, append([]string{"step-down", "--to", "ghost", "--timeout", "50m"}, q...)...)
	waitFor(t, 30*time.Second, "the holder stepping down for the ghost", func() bool { id, _ := leaderChild(mark); return id == "" })
	time.Sleep(2 * time.Second)
	if id, _ := leaderChild(mark); id != "" {
		t.Fatalf("%s leads while the key is reserved for another", id)
	}
	_, out, _, _ = runOnce(t, nil, append([]string{"status"}, q...)...)
	if !strings.Contains(out, "ghost") || strings.Contains(out, "void") {
		t.Errorf("status does not show the reservation for ghost:\n%s", out)
	}
	code, _, errOut, _ = runOnce(t, nil, append([]string{"resume"}, q...)...)
	if code != 0 || !strings.Contains(errOut, "cleared") || !strings.Contains(errOut, "ghost") {
		t.Errorf("resume of a reservation: exit %d, %q; want 0, saying it cleared the step-down to ghost", code, errOut)
	}
	next, e2 := leads("a leader once resume cleared the reservation")
	if e2 <= e1 {
		t.Errorf("after resume %s leads with epoch %d, not after %d", next, e2, e1)
	}
	_, out, _, _ = runOnce(t, nil, append([]string{"status"}, q...)...)
	if strings.Contains(out, "ghost") {
		t.Errorf("status still shows a reservation after resume:\n%s", out)
	}
	t.Logf("%s (epoch %d) stood aside for ghost; after resume %s leads (epoch %d)", first, e1, next, e2)
	sd.Signal(syscall.SIGTERM)
	sd.Wait(20 * time.Second)
	stopAll(a, bb)
}

// controlRecord is a control record with a step-down of key reserved
// until, for tests that write one by hand.
func controlRecord(key string, epoch uint64, to string, until time.Time) string {
	return `{"step_down":{"key":` + strconv.Quote(key) + `,"epoch":` + strconv.FormatUint(epoch, 10) +
		`,"to":` + strconv.Quote(to) + `,"by":"someone@elsewhere","at":"2026-01-01T00:00:00Z","until":"` +
		until.UTC().Format(time.RFC3339) + `"}}`
}
