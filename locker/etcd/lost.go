package etcd

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leaderrun/leaderrun/internal/retry"
)

// Bounds of the pause between failed re-reads of our key.
const (
	minReread = 100 * time.Millisecond
	maxReread = 2 * time.Second
)

// watchKey closes Lost when our election key is deleted (released, lease
// expired or revoked) or replaced by a key with another CreateRevision
// (DESIGN §1.3). It watches from rev, a revision at which the key was ours.
// Whenever the watch ends for any other reason (reconnect, lost leader,
// compaction) it re-reads the key: gone means lost at once, still ours
// means watch again from after that read. It returns when ctx ends or the
// client is closed.
func (s *lease) watchKey(ctx context.Context, rev int64) {
	defer close(s.watchDone)
	pause := minReread
	for {
		start := time.Now()
		if reason := s.follow(ctx, rev); reason != "" {
			s.markLost(reason)
			return
		}
		next, reason, ok := s.reread(ctx)
		if !ok {
			return
		}
		if reason != "" {
			s.markLost(reason)
			return
		}
		rev = next
		// A watch that keeps ending at once (say, a member without a
		// leader) must not become a busy loop of reads.
		if time.Since(start) > maxReread {
			pause = minReread
			continue
		}
		if !retry.Sleep(ctx, pause) {
			return
		}
		pause = min(2*pause, maxReread)
	}
}

// follow watches our key from rev until the watch ends. It returns a reason
// when an event shows the key gone or replaced, and "" otherwise.
func (s *lease) follow(ctx context.Context, rev int64) string {
	// WithRequireLeader: a member cut off from the leader ends the watch
	// instead of keeping it silently open, so that we re-read elsewhere.
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range s.cli.Watch(wctx, s.key, clientv3.WithRev(rev)) {
		for _, ev := range wr.Events {
			switch {
			case ev.Type == mvccpb.DELETE:
				return fmt.Sprintf("election key %s was deleted at revision %d (released, lease expired or revoked)",
					s.key, ev.Kv.ModRevision)
			case ev.Kv.CreateRevision != s.rev:
				return fmt.Sprintf("election key %s was re-created at revision %d by another writer", s.key, ev.Kv.CreateRevision)
			case clientv3.LeaseID(ev.Kv.Lease) != s.id:
				return detached(s.key, ev.Kv.Lease, ev.Kv.ModRevision)
			}
		}
		if wr.Err() != nil {
			s.log.Debug("watch on election key ended", "key", s.key, "error", wr.Err())
			return ""
		}
	}
	return ""
}

// reread reads our key until a read succeeds. It returns the revision to
// watch from next, or a reason when the key is gone or not ours; ok is
// false when ctx ended or the client was closed.
func (s *lease) reread(ctx context.Context) (next int64, reason string, ok bool) {
	pause := minReread
	for {
		if ctx.Err() != nil || s.cli.Ctx().Err() != nil {
			return 0, "", false
		}
		gctx, cancel := context.WithTimeout(ctx, s.timeout)
		resp, err := s.cli.Get(gctx, s.key)
		cancel()
		switch {
		case err != nil:
			s.log.Debug("re-reading election key failed", "key", s.key, "error", err)
		case len(resp.Kvs) == 0:
			return 0, fmt.Sprintf("election key %s is gone (read at revision %d)", s.key, resp.Header.Revision), true
		case resp.Kvs[0].CreateRevision != s.rev:
			return 0, fmt.Sprintf("election key %s was re-created at revision %d by another writer",
				s.key, resp.Kvs[0].CreateRevision), true
		case clientv3.LeaseID(resp.Kvs[0].Lease) != s.id:
			return 0, detached(s.key, resp.Kvs[0].Lease, resp.Kvs[0].ModRevision), true
		default:
			return resp.Header.Revision + 1, "", true
		}
		if !retry.Sleep(ctx, pause) {
			return 0, "", false
		}
		pause = min(2*pause, maxReread)
	}
}

// detached describes our election key written over without our lease (a
// `put` by hand): it no longer goes away with our lease, so its existence
// says nothing about our leadership any more.
func detached(key string, lease, rev int64) string {
	if lease == 0 {
		return fmt.Sprintf("election key %s was written without a lease at revision %d", key, rev)
	}
	return fmt.Sprintf("election key %s was moved to lease %x at revision %d", key, lease, rev)
}
