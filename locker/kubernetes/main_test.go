package kubernetes

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// testNamespace holds the tests' Leases.
const testNamespace = "default"

// server is one kube-apiserver (on its own etcd) shared by a test's
// subtests.
type server struct {
	kube  *testcluster.Kube
	etcd  *testcluster.Etcd
	admin string // kubeconfig of testcluster.KubeAdmin
}

func startServer(t *testing.T, users ...testcluster.KubeUser) *server {
	t.Helper()
	e := testcluster.StartEtcd(t, 1)
	k := testcluster.StartKube(t, e, users...)
	return &server{kube: k, etcd: e, admin: k.Kubeconfig(t, k.Token(testcluster.KubeAdmin), "")}
}

var candidates atomic.Int64

// newLocker returns a Locker for key with test defaults (TTL 2s, admin
// credentials, namespace default), adjusted by mods.
func (s *server) newLocker(t testing.TB, key string, mods ...func(*Config)) *Locker {
	t.Helper()
	cfg := Config{
		Options: locker.Options{
			Key:     key,
			ID:      fmt.Sprintf("%s-%d", key, candidates.Add(1)),
			TTL:     2 * time.Second,
			Version: "test",
		},
		Kubeconfig: s.admin,
		Namespace:  testNamespace,
		Timeout:    5 * time.Second,
	}
	cfg.Options.Key, cfg.Options.Slot = lockertest.KeySlot(key)
	cfg.Logger = lockertest.DebugLogger(key)
	return lockertest.Open(t, New, cfg, mods...)
}

// mustAcquire acquires and confirms (the supervisor's first renewal), or
// fails the test; the lease is released at the end.
func mustAcquire(t testing.TB, l *Locker) locker.Lease {
	t.Helper()
	lease := lockertest.MustAcquire(t, l)
	if _, err := lease.Renew(lockertest.Ctx(t, 5*time.Second)); err != nil {
		t.Fatalf("first Renew: %v", err)
	}
	return lease
}

// leading starts a server and a leader on a fresh key, renewing as its
// supervisor would until the test ends.
func leading(t *testing.T) (srv *server, key string, leader *Locker) {
	t.Helper()
	srv = startServer(t)
	key = lockertest.Key(t)
	leader = srv.newLocker(t, key)
	renewing(t, mustAcquire(t, leader))
	return srv, key, leader
}
