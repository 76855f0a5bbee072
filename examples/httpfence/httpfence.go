// Package httpfence is HTTP middleware that turns away a stale leader's
// writes: a client sends its LEADER_EPOCH in the Leader-Epoch request
// header, and the handler keeps, per key, the highest epoch it has let
// through. A request with a lower epoch gets 409 Conflict and never reaches
// the handler it guards; one without the header gets 428 Precondition
// Required. Requests of one key pass one at a time, so a stale request
// cannot slip in while a newer one is being handled. docs/FENCING.md
// explains the recipe; tests/recipes runs it on a real server.
//
// The highest epochs live in memory here. A service whose data outlives
// its process must keep them with the data (in the same transaction), or a
// restart forgets the fence.
package httpfence

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
)

// Header is the request header that carries the writer's epoch.
const Header = "Leader-Epoch"

// Fence guards a handler.
type Fence struct {
	next  http.Handler
	keyOf func(*http.Request) string

	mu   sync.Mutex
	keys map[string]*fenced
}

// fenced is one key's highest epoch, and the lock its requests pass under.
type fenced struct {
	mu      sync.Mutex
	highest uint64
}

// New guards next. keyOf names what a request writes to (the leadership
// key, a resource's path): epochs are compared per key. Nil fences every
// request against one epoch.
func New(next http.Handler, keyOf func(*http.Request) string) *Fence {
	if keyOf == nil {
		keyOf = func(*http.Request) string { return "" }
	}
	return &Fence{next: next, keyOf: keyOf, keys: map[string]*fenced{}}
}

// ServeHTTP passes r to the guarded handler only if its epoch is at least
// the highest seen for its key, and then raises that to r's epoch.
func (f *Fence) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := r.Header.Get(Header)
	if h == "" {
		http.Error(w, "a write needs the "+Header+" header", http.StatusPreconditionRequired)
		return
	}
	epoch, err := strconv.ParseUint(h, 10, 64)
	if err != nil {
		http.Error(w, Header+" must be a decimal epoch", http.StatusBadRequest)
		return
	}
	k := f.key(f.keyOf(r))
	k.mu.Lock()
	defer k.mu.Unlock()
	if epoch < k.highest {
		http.Error(w, fmt.Sprintf("stale leader: epoch %d, and epoch %d has written", epoch, k.highest), http.StatusConflict)
		return
	}
	k.highest = epoch
	f.next.ServeHTTP(w, r)
}

// Highest is the highest epoch let through for key, 0 if none.
func (f *Fence) Highest(key string) uint64 {
	k := f.key(key)
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.highest
}

func (f *Fence) key(name string) *fenced {
	f.mu.Lock()
	defer f.mu.Unlock()
	k, ok := f.keys[name]
	if !ok {
		k = &fenced{}
		f.keys[name] = k
	}
	return k
}
