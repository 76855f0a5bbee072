//go:build linux

package recipes

import (
	"strings"
	"testing"

	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// etcdArgs run leaderrun on e with a short lease.
func etcdArgs(e *testcluster.Etcd, key string) []string {
	return []string{"--backend", "etcd", "--etcd-endpoints", strings.Join(e.Endpoints(), ","), "--key", key,
		"--ttl", "4s", "--renew-interval", "1s", "--kill-grace", "1s", "--safety-margin", "500ms"}
}

// etcdGet reads key from e with etcdctl: its value, "" when it is absent.
func etcdGet(t testing.TB, e *testcluster.Etcd, key string) string {
	t.Helper()
	code, out := sh(t, []string{"PATH=" + jobPath(t, "etcdctl"), "ETCDCTL_ENDPOINTS=" + strings.Join(e.Endpoints(), ",")},
		"etcdctl get --print-value-only "+key)
	if code != 0 {
		t.Fatalf("etcdctl get %s: exit %d: %s", key, code, out)
	}
	return strings.TrimSuffix(out, "\n")
}

// etcdFenceInit is the recipe's start of a job: find the job's own
// election key.
const etcdFenceInit = `export FENCE_ETCD_LOCK="$(etcd-fence.sh lock)"`

// TestEtcdRecipe: examples/etcd-fence.sh writes in a transaction
// conditioned on the job's election key still existing with the job's
// epoch as its CreateRevision.
func TestEtcdRecipe(t *testing.T) {
	e := testcluster.StartEtcd(t, 1)
	env := []string{"PATH=" + jobPath(t, "etcdctl")}
	write := func(t *testing.T, env []string, value string) bool {
		code, out := sh(t, env, "etcd-fence.sh put /recipes/etcd "+value)
		switch code {
		case 0:
			return true
		case 1:
			t.Logf("rejected: %s", strings.TrimSpace(out))
			return false
		}
		t.Fatalf("etcd-fence.sh put: exit %d: %s", code, out)
		return false
	}
	proveFence(t, etcdArgs(e, "recipe-etcd"), etcdFenceInit, env, write,
		func(t *testing.T) string { return etcdGet(t, e, "/recipes/etcd") })
}
