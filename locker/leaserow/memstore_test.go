package leaserow

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/records"
)

// memDB is an in-memory store shared by several candidates' memStores, for
// the core's pure-logic tests only: the backends' tests run on real
// servers.
type memDB struct {
	mu    sync.Mutex
	rows  map[string]*Row
	runs  map[string]map[string][]byte
	terms map[string]map[string][]byte
	// controls are the control records by the key they are of (controlOf).
	controls map[string]memControl
	counter  uint64
	// lostAnswer, when set, makes the next Renew be written but answered
	// with an error, as a reply lost in the network.
	lostAnswer bool
	// lostTake, when set, makes the next Take or Create be written but
	// answered with an error.
	lostTake bool
	// epochBack, when set, makes the next Take or Create hand out this
	// epoch instead of the counter's next one.
	epochBack uint64
	writes    int
	// held are the keys ever acquired (the trace Tracer reports).
	held map[string]bool
}

func newMemDB() *memDB {
	return &memDB{rows: map[string]*Row{}, runs: map[string]map[string][]byte{},
		terms: map[string]map[string][]byte{}, controls: map[string]memControl{}, held: map[string]bool{}}
}

// memStore is one candidate's view of key in db.
type memStore struct {
	db  *memDB
	key string
}

func (s memStore) Read(context.Context) (Row, error) {
	s.db.mu.Lock()
	defer s.db.mu.Unlock()
	r, ok := s.db.rows[s.key]
	if !ok {
		return Row{}, ErrNoRow
	}
	row := *r
	row.HolderRecord = r.StoredHolder()
	return row, nil
}

func (s memStore) Traced(context.Context) (bool, error) {
	s.db.mu.Lock()
	defer s.db.mu.Unlock()
	return s.db.held[s.key], nil
}

// owns reports whether r still holds every field of prev a holder owns.
func owns(r *Row, prev Row) bool {
	return sameOwned(*r, prev)
}

func (s memStore) nextEpoch() uint64 {
	if e := s.db.epochBack; e != 0 {
		s.db.epochBack = 0
		return e
	}
	s.db.counter++
	return s.db.counter
}

func (s memStore) Create(_ context.Context, row Row) (uint64, error) {
	s.db.mu.Lock()
	defer s.db.mu.Unlock()
	s.db.writes++
	if _, ok := s.db.rows[s.key]; ok {
		return 0, ErrConflict
	}
	row.Epoch = s.nextEpoch()
	s.db.rows[s.key] = &row
	s.db.held[s.key] = true
	return s.answer(row.Epoch)
}

func (s memStore) Take(_ context.Context, prev string, row Row) (uint64, error) {
	s.db.mu.Lock()
	defer s.db.mu.Unlock()
	s.db.writes++
	r, ok := s.db.rows[s.key]
	if !ok || r.Version != prev {
		return 0, ErrConflict
	}
	row.Epoch = s.nextEpoch()
	*r = row
	s.db.held[s.key] = true
	return s.answer(row.Epoch)
}

// answer is a claim's answer: lost once when lostTake is set.
func (s memStore) answer(epoch uint64) (uint64, error) {
	if s.db.lostTake {
		s.db.lostTake = false
		return 0, errors.New("i/o timeout")
	}
	return epoch, nil
}

func (s memStore) Renew(_ context.Context, prev Row, row Row) error {
	s.db.mu.Lock()
	defer s.db.mu.Unlock()
	s.db.writes++
	r, ok := s.db.rows[s.key]
	if !ok || !owns(r, prev) {
		return ErrConflict
	}
	row.Epoch = r.Epoch
	*r = row
	if s.db.lostAnswer {
		s.db.lostAnswer = false
		return errors.New("i/o timeout")
	}
	return nil
}

func (s memStore) Clear(_ context.Context, prev Row, next string) error {
	s.db.mu.Lock()
	defer s.db.mu.Unlock()
	s.db.writes++
	r, ok := s.db.rows[s.key]
	if !ok || !owns(r, prev) {
		return ErrConflict
	}
	r.Term, r.Holder, r.Contract, r.Version = "", locker.Holder{}, Released, next
	return nil
}

func (s memStore) PutRun(_ context.Context, term string, run locker.Run) error {
	s.db.mu.Lock()
	defer s.db.mu.Unlock()
	if r, ok := s.db.rows[s.key]; !ok || r.Term != term {
		return ErrConflict
	}
	if s.db.runs[s.key] == nil {
		s.db.runs[s.key] = map[string][]byte{}
	}
	s.db.runs[s.key][run.Slot] = run.Record()
	return nil
}

func (s memStore) ListRuns(context.Context) ([]records.Entry, error) {
	s.db.mu.Lock()
	defer s.db.mu.Unlock()
	var runs []records.Entry
	for slot, v := range s.db.runs[s.key] {
		runs = append(runs, records.Entry{Name: slot, Value: v})
	}
	return runs, nil
}

func (s memStore) PutTerm(_ context.Context, term locker.Term, keep int) error {
	s.db.mu.Lock()
	defer s.db.mu.Unlock()
	if s.db.terms[s.key] == nil {
		s.db.terms[s.key] = map[string][]byte{}
	}
	m := s.db.terms[s.key]
	m[locker.TermName(term.Epoch)] = term.Record()
	var all []locker.Term
	for n := range m {
		e, _ := strconv.ParseUint(n, 10, 64)
		all = append(all, locker.Term{Epoch: e})
	}
	for _, e := range locker.Pruned(all, keep) {
		delete(m, locker.TermName(e))
	}
	return nil
}

func (s memStore) ListTerms(context.Context) ([]records.Entry, error) {
	s.db.mu.Lock()
	defer s.db.mu.Unlock()
	var all []records.Entry
	for n, v := range s.db.terms[s.key] {
		all = append(all, records.Entry{Name: n, Value: v})
	}
	return all, nil
}

type memControl struct {
	value   []byte
	version uint64
}

func (s memStore) ReadControl(context.Context) ([]byte, uint64, error) {
	s.db.mu.Lock()
	defer s.db.mu.Unlock()
	c, ok := s.db.controls[controlOf(s.key)]
	if !ok {
		return nil, 0, ErrNoRow
	}
	return c.value, c.version, nil
}

func (s memStore) WriteControl(_ context.Context, prev uint64, value []byte) error {
	s.db.mu.Lock()
	defer s.db.mu.Unlock()
	k := controlOf(s.key)
	if s.db.controls[k].version != prev {
		return ErrConflict
	}
	s.db.controls[k] = memControl{value: value, version: prev + 1}
	return nil
}

func (s memStore) Target() (string, time.Duration) { return "memory", time.Second }
func (s memStore) Close() error                    { return nil }

// edit changes key's row by hand: a new version, the rest as change says.
func (db *memDB) edit(key string, change func(*Row)) {
	db.mu.Lock()
	defer db.mu.Unlock()
	r := db.rows[key]
	change(r)
	r.Version = "edited-" + token()
}

// editKeep changes key's row by hand as plain SQL does: the version stays.
func (db *memDB) editKeep(key string, change func(*Row)) {
	db.mu.Lock()
	defer db.mu.Unlock()
	change(db.rows[key])
}

// remove deletes key's row by hand.
func (db *memDB) remove(key string) {
	db.mu.Lock()
	defer db.mu.Unlock()
	delete(db.rows, key)
}

// controlOf is the key whose control record the row name holds: the key
// itself, for a slot key too, as a backend's store files it.
func controlOf(name string) string {
	if key, _, ok := locker.SplitSlotKey(name); ok {
		return key
	}
	return name
}
