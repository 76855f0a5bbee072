package etcd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leaderrun/leaderrun/internal/retry"
	"github.com/leaderrun/leaderrun/locker"
)

// The control record (locker.Controls) is one plain key
// /<prefix>/<key>/~control, with no lease, shared by the key's slot keys:
// a Locker for <key>~2 reads and writes the record of <key>. Its version is
// the key's ModRevision. It lies beside the mark and the once-per records
// ('~' never occurs in a key, so it cannot be another key's record), under
// none of the election prefixes (/<prefix>/<key>/@, /<prefix>/<key>~N/@):
// no candidate ever waits on it. Leader leaves it out when it asks whether
// the key was ever used (leader.go): a pause written before any candidate
// ran does not make a key "used here", so a mistyped key or prefix is still
// named as such.

var _ locker.Controls = (*Locker)(nil)

// controlKey is the key's control record.
func (l *Locker) controlKey() string {
	return "/" + l.opts.Prefix + "/" + locker.ControlKey(l.opts.Key) + "/~control"
}

// Control reads the control record linearizably.
func (l *Locker) Control(ctx context.Context) (locker.Control, error) {
	cli, err := l.client(ctx)
	if err != nil {
		return locker.Control{}, err
	}
	c, _, err := l.readControl(ctx, cli)
	return c, err
}

// readControl reads the record linearizably, with the revision of the read.
func (l *Locker) readControl(ctx context.Context, cli *clientv3.Client) (locker.Control, int64, error) {
	gctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	resp, err := cli.Get(gctx, l.controlKey())
	if err != nil {
		if ctx.Err() != nil {
			return locker.Control{}, 0, ctx.Err()
		}
		return locker.Control{}, 0, classify("etcd: read the control record "+l.controlKey(), err)
	}
	if len(resp.Kvs) == 0 {
		return locker.Control{}, resp.Header.Revision, nil
	}
	c, err := l.parseControl(resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
	return c, resp.Header.Revision, err
}

func (l *Locker) parseControl(value []byte, rev int64) (locker.Control, error) {
	c, err := locker.ParseControl(value, strconv.FormatInt(rev, 10))
	if err != nil {
		return locker.Control{}, fmt.Errorf("etcd: %s: %w", l.controlKey(), err)
	}
	return c, nil
}

// SetControl writes the record in one transaction conditioned on its
// ModRevision still being c.Version (on its absence for an empty Version).
// It needs no lease. The version written is the transaction's revision.
func (l *Locker) SetControl(ctx context.Context, c locker.Control) (string, error) {
	cmp := clientv3.Compare(clientv3.CreateRevision(l.controlKey()), "=", 0)
	if c.Version != "" {
		rev, err := strconv.ParseInt(c.Version, 10, 64)
		if err != nil || rev <= 0 || strconv.FormatInt(rev, 10) != c.Version {
			// Never a version of this record: it cannot be the current one.
			return "", fmt.Errorf("etcd: set the control record %s: version %q: %w", l.controlKey(), c.Version, locker.ErrConflict)
		}
		cmp = clientv3.Compare(clientv3.ModRevision(l.controlKey()), "=", rev)
	}
	cli, err := l.client(ctx)
	if err != nil {
		return "", err
	}
	tctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	resp, err := cli.Txn(tctx).If(cmp).Then(clientv3.OpPut(l.controlKey(), string(c.Record()))).Commit()
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", classify("etcd: set the control record "+l.controlKey(), err)
	}
	if !resp.Succeeded {
		return "", fmt.Errorf("etcd: set the control record %s: not at version %q: %w", l.controlKey(), c.Version, locker.ErrConflict)
	}
	// A write transaction has one revision: the key's new ModRevision.
	return strconv.FormatInt(resp.Header.Revision, 10), nil
}

// WaitControl reads the record and, while its version is still version,
// watches it from the revision after that read: one watch on the client's
// shared watch stream, nothing sent while the record stays as it is.
// Whenever the watch ends otherwise (a member without a leader, a
// reconnect, a compaction) it reads again and watches from there, so no
// write between the two is missed. Only a refusal or a closed Locker ends
// it with an error; a cluster out of reach is waited out until ctx ends.
func (l *Locker) WaitControl(ctx context.Context, version string) (locker.Control, error) {
	pause := minReread
	for {
		start := time.Now()
		c, rev, err := l.waitControlOnce(ctx, version)
		switch {
		case err == nil && c.Version != version:
			return c, nil
		case ctx.Err() != nil:
			return locker.Control{}, ctx.Err()
		case errors.Is(err, locker.ErrRefused), errors.Is(err, errClosed):
			return locker.Control{}, err
		case err != nil:
			l.log.Debug("waiting on the control record failed; reading it again", "key", l.controlKey(), "revision", rev, "error", err)
		}
		// A watch that keeps ending at once must not become a busy loop
		// of reads.
		if time.Since(start) > maxReread {
			pause = minReread
			continue
		}
		if !retry.Sleep(ctx, pause) {
			return locker.Control{}, ctx.Err()
		}
		pause = min(2*pause, maxReread)
	}
}

// waitControlOnce is one read and, if the record is still at version, one
// watch from after the read until it shows another version or ends.
func (l *Locker) waitControlOnce(ctx context.Context, version string) (locker.Control, int64, error) {
	cli, err := l.client(ctx)
	if err != nil {
		return locker.Control{}, 0, err
	}
	c, rev, err := l.readControl(ctx, cli)
	if err != nil || c.Version != version {
		return c, rev, err
	}
	// WithRequireLeader: a member cut off from the leader ends the watch
	// instead of keeping it silently open, so that we read again
	// elsewhere.
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range cli.Watch(wctx, l.controlKey(), clientv3.WithRev(rev+1)) {
		if n := len(wr.Events); n > 0 {
			ev := wr.Events[n-1]
			c := locker.Control{}
			if ev.Type == clientv3.EventTypePut {
				if c, err = l.parseControl(ev.Kv.Value, ev.Kv.ModRevision); err != nil {
					return c, rev, err
				}
			}
			if c.Version != version {
				return c, rev, nil
			}
		}
		if err := wr.Err(); err != nil {
			if refusal(err) {
				return locker.Control{}, rev, classify("etcd: watch the control record "+l.controlKey(), err)
			}
			return locker.Control{}, rev, fmt.Errorf("etcd: watch the control record %s: %w", l.controlKey(), err)
		}
	}
	return locker.Control{}, rev, fmt.Errorf("etcd: watch the control record %s ended", l.controlKey())
}
