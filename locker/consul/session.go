package consul

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/consul/consulwire"
)

// createSession makes the session a candidate campaigns with: TTL only
// unless checks were opted into (DESIGN §1.5), Behavior release so that the
// key is freed the moment the session ends.
func (l *Locker) createSession(ctx context.Context) (string, error) {
	body := map[string]any{
		"Name":      l.sessionName(),
		"TTL":       l.ttlString(),
		"Behavior":  api.SessionBehaviorRelease,
		"LockDelay": fmt.Sprintf("%dms", l.lockDelay.Milliseconds()),
	}
	// Without these fields the agent attaches serfHealth. It reads an empty
	// "Checks" as "no node checks at all", so send it only for TTL-only
	// sessions; opted-in checks go in "NodeChecks" alone.
	if len(l.checks) == 0 {
		body["Checks"], body["NodeChecks"] = []string{}, []string{}
	} else {
		body["NodeChecks"] = l.checks
	}
	// The server may create the session even when our ctx ends while the
	// answer is on its way; a short grace lets us learn its ID and destroy
	// it instead of leaving it to expire.
	var out struct{ ID string }
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
	defer cancel()
	grace := context.AfterFunc(ctx, func() { time.AfterFunc(createGrace, cancel) })
	defer grace()
	if err := l.do(cctx, func(c *api.Client) error {
		_, err := c.Raw().Write("/v1/session/create", body, &out, l.writeOpts(cctx))
		return err
	}); err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		if cerr := l.sessionRefused(err); cerr != nil {
			return "", cerr
		}
		return "", l.fail("create consul session", err)
	}
	if out.ID == "" {
		return "", errors.New("create consul session: agent returned no session ID")
	}
	if ctx.Err() != nil {
		l.destroySession(out.ID)
		return "", ctx.Err()
	}
	if err := l.checkSession(ctx, out.ID); err != nil {
		l.destroySession(out.ID)
		return "", err
	}
	l.log.Debug("session created", "session", out.ID, "ttl", l.opts.TTL, "lock_delay", l.lockDelay, "checks", l.checks)
	return out.ID, nil
}

// checkSession reads the new session back and refuses to campaign with one
// that carries health checks we did not ask for (DESIGN §1.5): such a check
// could end the session before the supervisor's deadline.
func (l *Locker) checkSession(ctx context.Context, id string) error {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var se *api.SessionEntry
	err := l.do(cctx, func(c *api.Client) (err error) {
		se, _, err = c.Session().Info(id, l.queryOpts(cctx, true))
		return err
	})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return l.fail("read back consul session "+id, err)
	}
	if se == nil {
		return fmt.Errorf("read back consul session %s: it is already gone", id)
	}
	got := sessionChecks(se)
	if !slices.Equal(got, l.checks) {
		return fmt.Errorf("consul session %s carries checks %q, asked for %q (DESIGN §1.5): %w",
			id, got, l.checks, locker.ErrRefused)
	}
	if se.LockDelay != l.lockDelay {
		return fmt.Errorf("consul session %s has lock-delay %v, asked for %v: %w", id, se.LockDelay, l.lockDelay, locker.ErrRefused)
	}
	if se.TTL != l.ttlString() {
		return fmt.Errorf("consul session %s has TTL %q, asked for %q: %w", id, se.TTL, l.ttlString(), locker.ErrRefused)
	}
	return nil
}

// sessionChecks lists every check a session depends on, in the order the
// server returns them.
func sessionChecks(se *api.SessionEntry) []string {
	var out []string
	for _, c := range se.NodeChecks {
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	for _, c := range se.Checks {
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	for _, c := range se.ServiceChecks {
		out = append(out, "service:"+c.ID)
	}
	return out
}

// renewSession makes exactly one renewal round trip bounded by ctx and
// returns the TTL the server reports. A session the server no longer knows
// is an error wrapping locker.ErrLost.
func (l *Locker) renewSession(ctx context.Context, id string) (time.Duration, error) {
	// Through Raw rather than Session().Renew, which drops the server's
	// reason from every error and hides the status code.
	var entries []*api.SessionEntry
	err := l.do(ctx, func(c *api.Client) error {
		_, err := c.Raw().Write("/v1/session/renew/"+id, nil, &entries, l.writeOpts(ctx))
		return err
	})
	var se api.StatusError
	switch {
	case errors.As(err, &se) && se.Code == http.StatusNotFound:
		return 0, fmt.Errorf("renew consul session %s: the session is gone (expired or destroyed): %w (%s)", id, locker.ErrLost, se.Body)
	case err != nil:
		return 0, l.fail("renew consul session "+id, err)
	case len(entries) == 0 || entries[0] == nil:
		return 0, fmt.Errorf("renew consul session %s: the session is gone (empty answer): %w", id, locker.ErrLost)
	}
	granted, err := time.ParseDuration(entries[0].TTL)
	if err != nil || granted <= 0 {
		// Never report a TTL we were not given (locker.Lease.Renew).
		return 0, fmt.Errorf("renew consul session %s: server granted unreadable TTL %q", id, entries[0].TTL)
	}
	return granted, nil
}

// abandon gives up a candidate session after a failed Acquire: an acquire
// whose answer was lost may have made it the holder, and destroying a
// holding session puts the key into its lock-delay for everyone, our own
// next attempt included. So it first releases the key (a no-op unless this
// session holds it) with the release marker, so that a standby that saw it
// hold the key takes it at once, then destroys the session, both on one
// fresh short timeout. No child ever ran under this session.
func (l *Locker) abandon(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if err := l.do(ctx, func(c *api.Client) error {
		_, _, err := c.KV().Release(&api.KVPair{Key: l.path, Session: id, Value: consulwire.Released(id)}, l.writeOpts(ctx))
		return err
	}); err != nil {
		l.log.Debug("give back key after failed acquire failed", "key", l.path, "session", id, "error", l.scrub(err))
	}
	l.destroySessionCtx(ctx, id)
}

// destroySession ends a session on a fresh short timeout: it runs when the
// caller's context may already be done. Failure only means the session
// expires on its own after its TTL.
func (l *Locker) destroySession(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	l.destroySessionCtx(ctx, id)
}

// destroySessionCtx ends a session within ctx; failure is only logged.
func (l *Locker) destroySessionCtx(ctx context.Context, id string) {
	if err := l.do(ctx, func(c *api.Client) error {
		_, err := c.Session().Destroy(id, l.writeOpts(ctx))
		return err
	}); err != nil {
		l.log.Debug("destroy session failed; it will expire after its TTL", "session", id, "error", l.scrub(err))
		return
	}
	l.log.Debug("session destroyed", "session", id)
}

// keepCandidate renews a standby's session every TTL/3 until ctx ends,
// and, when it is queued near enough the head (place, queue.go), writes
// its queue entry after each renewal. It reports a session the server
// dropped through gone. Once Acquire returns, the only renewals are the
// supervisor's (DESIGN §6).
func (l *Locker) keepCandidate(ctx context.Context, id string, gone context.CancelCauseFunc, place *spot) {
	interval := l.opts.TTL / 3
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		_, err := l.renewSession(cctx, id)
		if err == nil && place != nil && place.Near() {
			ahead := place.Ahead()
			if qerr := l.enqueue(cctx, id, place.beat.Add(1), place.who, ahead); qerr == nil {
				place.Said(ahead)
			} else if ctx.Err() == nil {
				l.log.Debug("queue entry write failed; retrying with the next renewal", "key", l.entryKey(id), "error", qerr)
			}
		}
		cancel()
		next := interval
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, locker.ErrLost):
			// Not ErrLost for Acquire's caller: no leadership was lost.
			gone(fmt.Errorf("candidate session ended while waiting: %v", err))
			return
		case err != nil:
			l.log.Debug("standby session renewal failed; retrying", "session", id, "error", err)
			next = time.Second
		}
		timer.Reset(next)
	}
}

// ttlString is the TTL as sent to Consul; the server echoes it back.
func (l *Locker) ttlString() string {
	return l.opts.TTL.String()
}

// sessionRefused recognises a session create that no retry can make work
// and returns it as a configuration error: the servers' session_ttl_min is
// above our TTL, the datacenter does not exist, or it is not the one of the
// agent we talk to (a session is tied to that agent's node, so a lock in
// another datacenter must go through an address in that datacenter).
func (l *Locker) sessionRefused(err error) error {
	var se api.StatusError
	if !errors.As(err, &se) {
		return nil
	}
	body := strings.TrimSpace(se.Body)
	switch {
	case strings.Contains(body, "Invalid Session TTL"):
		return configError("TTL", fmt.Sprintf(
			"%v is below the Consul servers' minimum session TTL (their session_ttl_min; they answered %q)", l.opts.TTL, body), nil)
	case strings.Contains(body, "No path to datacenter"):
		return configError("Datacenter", fmt.Sprintf("%q is not a datacenter Consul knows", l.dc), nil)
	case l.dc != "" && strings.Contains(body, "Missing node registration"):
		return configError("Datacenter", fmt.Sprintf(
			"%q is not the datacenter of the agent at this address: a session belongs to that agent's node, so give an address of an agent or server in %q", l.dc, l.dc), nil)
	}
	return nil
}
