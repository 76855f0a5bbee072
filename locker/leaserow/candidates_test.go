package leaserow

import (
	"testing"

	"github.com/leaderrun/leaderrun/locker"
)

// A waiting candidate writes nothing to the lease row's store, so the
// lease-row backends (PostgreSQL, DynamoDB) list no candidates: status
// says "not listed by this backend" (docs/BACKENDS.md, "Who waits").
func TestListsNoCandidates(t *testing.T) {
	t.Parallel()
	if _, ok := any(&Locker{}).(locker.Candidates); ok {
		t.Fatal("a lease-row Locker lists candidates; its docs say it cannot")
	}
}
