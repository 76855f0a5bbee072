package consul

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/consul/consulwire"
)

// Leader reads the current holder with consistent reads: the key, whose
// ModifyIndex is the holder's epoch, then its session, whose TTL is the
// LeaseRemaining Consul can tell us. It returns an error wrapping
// locker.ErrNoLeader when nobody holds the key.
func (l *Locker) Leader(ctx context.Context) (locker.Holder, error) {
	var h locker.Holder
	err := l.onEach(ctx, func(ctx context.Context) (err error) {
		h, err = l.leader(ctx)
		return err
	})
	return h, err
}

// leader is one attempt of Leader.
func (l *Locker) leader(ctx context.Context) (locker.Holder, error) {
	var pair *api.KVPair
	err := l.do(ctx, func(c *api.Client) (err error) {
		pair, _, err = c.KV().Get(l.path, l.queryOpts(ctx, true))
		return err
	})
	if err != nil {
		return locker.Holder{}, l.fail("read "+l.path, err)
	}
	if pair == nil {
		// A release leaves the key in place, free; only once-per records
		// can show a key that was used and then deleted by hand.
		var keys []string
		err := l.do(ctx, func(c *api.Client) (err error) {
			keys, _, err = c.KV().Keys(l.path+"/~", "", l.queryOpts(ctx, true))
			return err
		})
		// A token that may read the key but not list beside it still
		// gets "no leader": only whether it was used is unknown.
		if err != nil {
			if err := l.fail("read the records of "+l.path, err); !errors.Is(err, locker.ErrRefused) {
				return locker.Holder{}, err
			}
		} else if !slices.ContainsFunc(keys, l.isRecord) {
			return locker.Holder{}, l.neverUsed()
		}
	}
	if pair == nil || pair.Session == "" {
		return locker.Holder{}, fmt.Errorf("read %s: %w", l.path, locker.ErrNoLeader)
	}
	var se *api.SessionEntry
	err = l.do(ctx, func(c *api.Client) (err error) {
		se, _, err = c.Session().Info(pair.Session, l.queryOpts(ctx, true))
		return err
	})
	if err != nil {
		return locker.Holder{}, l.fail("read session of "+l.path, err)
	}
	if se == nil {
		// The session ended between the two reads; Behavior release has
		// freed the key with it.
		return locker.Holder{}, fmt.Errorf("read %s: holder session just ended: %w", l.path, locker.ErrNoLeader)
	}
	h := locker.ParseHolder(pair.Value)
	h.Epoch = epochOf(pair, declaresContract(se.Name))
	// Consul does not say how much of the TTL is left, only the TTL itself,
	// which bounds it from above.
	if ttl, err := time.ParseDuration(se.TTL); err == nil {
		h.LeaseRemaining = ttl
	}
	return h, nil
}

// isRecord reports whether a KV key listed beside the lock key is a record
// of its use. An entry in the candidates' queue is not one: a candidate
// killed before its first acquire leaves one behind. Nor is the control
// record (records.go): an operator may pause a key no candidate ran for.
func (l *Locker) isRecord(key string) bool {
	return !strings.HasPrefix(key, l.path+queueDir) && key != l.controlPath()
}

// neverUsed is Leader's answer when neither the KV key nor records beside
// it exist: it names the KV path, the addresses and the datacenter.
func (l *Locker) neverUsed() error {
	where := "KV " + l.path + " on Consul " + strings.Join(l.ep.addrs, ",")
	fields := []string{"Address", "Prefix"}
	if l.dc != "" {
		where += " (datacenter " + l.dc + ")"
		fields = append(fields, "Datacenter")
	}
	return &locker.NeverUsedError{Key: l.opts.Name(), Where: where, Fields: fields}
}

// ReleaseHandle gives back the lease named by a handle from Lease.Handle,
// possibly in another process, as Lease.Release does: it frees the key
// (no lock-delay) and destroys the session. The dead-man guard calls it only
// once it has seen the old child's process group gone (locker.Locker), so
// the next holder may start at once. A session that is already gone is not
// an error.
func (l *Locker) ReleaseHandle(ctx context.Context, handle string) error {
	session, key, err := parseHandle(handle)
	if err != nil {
		return err
	}
	if key != l.path {
		return fmt.Errorf("release: handle names key %s, this locker holds %s", key, l.path)
	}
	if err := l.giveBack(ctx, session); err != nil {
		return err
	}
	l.log.Debug("released by handle", "key", key, "session", session)
	return nil
}

// formatHandle encodes a session and the KV path of its key.
func formatHandle(session, key string) string { return consulwire.Handle(session, key) }

// parseHandle decodes formatHandle.
func parseHandle(handle string) (session, key string, err error) {
	session, key, err = consulwire.ParseHandle(handle)
	if err != nil {
		return "", "", fmt.Errorf("release: %w", err)
	}
	return session, key, nil
}

// epochOf is the epoch of the holder of pair. A holder that follows the
// observer-clock contract created the key with its acquire, and its
// heartbeats (or a write by hand) move only the ModifyIndex: its epoch is
// the CreateIndex. An older leaderrun acquired an existing key and never
// wrote it again: its epoch is the ModifyIndex.
func epochOf(pair *api.KVPair, follows bool) uint64 {
	if follows {
		return pair.CreateIndex
	}
	return pair.ModifyIndex
}
