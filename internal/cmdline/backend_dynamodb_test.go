//go:build linux

package cmdline

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/leaderrun/leaderrun/guard"
	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// TestGuardReleasesDynamoDBItem: the guard is leaderrun itself, and its
// release from the hello alone (FromHello rebuilds the settings) frees the
// item the run held.
func TestGuardReleasesDynamoDBItem(t *testing.T) {
	d := testcluster.StartDynalite(t)
	d.SetEnv(t)
	s := &dynamodbSettings{Table: "leaderrun", CreateTable: true, Endpoint: d.Endpoint(), Timeout: 2 * time.Second}
	opts := locker.Options{Key: "guarded", Prefix: "leaderrun", ID: "a", TTL: 5 * time.Second}
	lk, err := s.New(opts, false, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	ls := lockertest.MustAcquire(t, lk)
	settings, whyFull := s.Guard(lk)
	if whyFull == "" {
		t.Fatal("the small guard is said to release a DynamoDB item by itself")
	}
	raw, err := json.Marshal(settings)
	if err != nil {
		t.Fatal(err)
	}
	hello, err := json.Marshal(guard.BackendHello{Backend: "dynamodb", Options: opts, Settings: raw})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := releaseFromHello(ctx, hello, ls.Handle()); err != nil {
		t.Fatalf("release from the hello: %v", err)
	}
	if h, err := lk.Leader(ctx); !errors.Is(err, locker.ErrNoLeader) {
		t.Fatalf("after the guard's release the item is held by %+v (%v)", h, err)
	}
	if err := releaseFromHello(ctx, hello, ls.Handle()); err != nil {
		t.Fatalf("second release: %v", err)
	}
}
