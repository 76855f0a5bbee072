//go:build linux

package recipes

import (
	"strings"
	"testing"

	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// TestConsulRecipe: examples/consul-fence.sh keeps the highest epoch in a
// fence key, set by check-and-set on its ModifyIndex in the transaction
// that writes.
func TestConsulRecipe(t *testing.T) {
	c := testcluster.StartConsul(t, testcluster.ConsulOptions{Servers: 1})
	addr := c.HTTPAddr(0)
	args := []string{"--backend", "consul", "--consul-addr", addr, "--key", "recipe-consul",
		"--ttl", "10s", "--renew-interval", "2s", "--kill-grace", "2s", "--safety-margin", "1s"}
	write := func(t *testing.T, env []string, value string) bool {
		code, out := sh(t, env, "consul-fence.sh put recipes/consul "+value)
		switch code {
		case 0:
			return true
		case 1:
			t.Logf("rejected: %s", strings.TrimSpace(out))
			return false
		}
		t.Fatalf("consul-fence.sh put: exit %d: %s", code, out)
		return false
	}
	read := func(t *testing.T) string {
		code, out := sh(t, []string{"PATH=" + jobPath(t)},
			"curl -sS 'http://"+addr+"/v1/kv/recipes/consul?raw&consistent'")
		if code != 0 {
			t.Fatalf("read recipes/consul: exit %d: %s", code, out)
		}
		return out
	}
	proveFence(t, args, "", []string{"PATH=" + jobPath(t)}, write, read)
}
