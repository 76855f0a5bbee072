package consul

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// TestEpochSurvivesWriteByHand: a `consul kv put` on the held key changes
// its ModifyIndex but grants nobody anything: Leader still reports the
// holder's epoch, and the holder keeps leading.
func TestEpochSurvivesWriteByHand(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testcluster.ConsulOptions{Servers: 1})
	l := c.locker(t, "byhand", c.HTTPAddr(0))
	ls := acquire(t, l)
	defer release(t, ls)
	if _, err := c.admin.KV().Put(&api.KVPair{Key: l.path, Value: []byte("by hand")}, nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h, err := l.Leader(ctx)
	if err != nil || h.Epoch != ls.Epoch() {
		t.Fatalf("Leader after a write by hand: %+v, %v; want epoch %d", h, err, ls.Epoch())
	}
	if _, err := ls.Renew(ctx); err != nil {
		t.Logf("first renewal after the write by hand: %v", err)
	}
	if _, err := ls.Renew(ctx); err != nil {
		t.Fatalf("the holder cannot renew after a write by hand: %v", err)
	}
	select {
	case <-ls.Lost():
		t.Fatalf("Lost after a write by hand: %s", ls.LostReason())
	default:
	}
	if h, err := l.Leader(ctx); err != nil || h.Epoch != ls.Epoch() || h.ID != l.opts.ID {
		t.Fatalf("Leader after the holder rewrote its record: %+v, %v; want %s epoch %d", h, err, l.opts.ID, ls.Epoch())
	}
}
