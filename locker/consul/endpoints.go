package consul

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
)

// endpoints are the Consul addresses a Locker talks to, one client each,
// and which of them is in use. Sessions and keys live in the servers' Raft
// state, so any server (or agent) of the datacenter can take any request:
// when one fails, the next request goes to the next address. With one
// address nothing ever moves.
type endpoints struct {
	addrs   []string
	clients []*api.Client
	log     hclog.Logger

	mu    sync.Mutex
	cur   int
	moved chan struct{} // closed and replaced whenever cur changes
}

// splitAddresses parses a comma-separated list of Consul addresses. Empty
// items are refused; a unix socket only makes sense on its own.
func splitAddresses(list string) ([]string, error) {
	var out []string
	for _, a := range strings.Split(list, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			return nil, fmt.Errorf("empty address in %q", list)
		}
		out = append(out, a)
	}
	if len(out) > 1 {
		for _, a := range out {
			if strings.HasPrefix(a, "unix://") {
				return nil, fmt.Errorf("a unix socket (%s) cannot be part of a list of addresses", a)
			}
		}
	}
	return out, nil
}

// pick returns the address in use and its client.
func (e *endpoints) pick() (int, *api.Client) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cur, e.clients[e.cur]
}

// movedFrom returns a channel that is closed once address at is no longer
// the one in use (at once if it already is not).
func (e *endpoints) movedFrom(at int) <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cur != at {
		closed := make(chan struct{})
		close(closed)
		return closed
	}
	return e.moved
}

// failed notes that a request to address at failed with err under ctx.
// Unless the failure is one every server would give (a refusal, a 4xx
// answer) or the caller itself gave up, the next request goes to the next
// address. Only the first report of a failure of the address in use moves:
// a renewal and a watch failing together skip no address.
func (e *endpoints) failed(ctx context.Context, at int, err error) {
	if len(e.addrs) < 2 || !movable(ctx, err) {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cur != at {
		return
	}
	e.cur = (at + 1) % len(e.addrs)
	close(e.moved)
	e.moved = make(chan struct{})
	e.log.Info("consul request failed; moving to the next address", "from", e.addrs[at], "to", e.addrs[e.cur], "error", err)
}

// movable reports whether another address might answer where this one
// failed: a transport error, a timeout, or a server-side 5xx (such as a
// server cut off from its Raft leader). A request the caller cancelled, an
// answer with a 4xx status and a refusal are the same everywhere.
func movable(ctx context.Context, err error) bool {
	if err == nil || errors.Is(ctx.Err(), context.Canceled) || refused(err) {
		return false
	}
	var se api.StatusError
	if errors.As(err, &se) {
		return se.Code >= 500
	}
	return true
}

// abortOnMove cancels a long request (a blocking query) to address at as
// soon as another address is in use: the watch moves with the renewals
// instead of waiting on a server they gave up on. Call the returned
// function when the request is done.
func (e *endpoints) abortOnMove(at int, cancel context.CancelFunc) (done func()) {
	if len(e.addrs) < 2 {
		return func() {}
	}
	moved := e.movedFrom(at)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-moved:
			cancel()
		case <-stop:
		}
	}()
	return func() {
		close(stop)
		wg.Wait()
	}
}

// do runs one request on the address in use; ctx must be the request's own
// (it tells a timeout from a caller that gave up). A failure moves later
// requests to the next address (endpoints.failed).
func (l *Locker) do(ctx context.Context, req func(*api.Client) error) error {
	at, c := l.ep.pick()
	err := req(c)
	if err != nil {
		l.ep.failed(ctx, at, err)
	}
	return err
}

// onEach makes attempt on successive addresses until it succeeds, fails
// in a way every server would, or each address was tried once. Every try
// gets an equal share of the time ctx has left, so one silent server
// cannot use it all. With one address it is attempt(ctx).
func (l *Locker) onEach(ctx context.Context, attempt func(ctx context.Context) error) error {
	n := len(l.ep.addrs)
	var err error
	for i := range n {
		actx, cancel := ctx, context.CancelFunc(func() {})
		if dl, ok := ctx.Deadline(); ok && n-i > 1 {
			actx, cancel = context.WithTimeout(ctx, time.Until(dl)/time.Duration(n-i))
		}
		err = attempt(actx)
		retry := err != nil && ctx.Err() == nil && movable(actx, err)
		cancel()
		if !retry {
			return err
		}
	}
	return err
}
