//go:build linux

package recipes

import (
	"os"
	"os/exec"
	"path/filepath"
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

// TestConsulRecipeCheckAndSet: a rival leader that moves the fence between
// the recipe's read and its transaction makes the transaction roll back,
// and the recipe, reading the fence again, gives up as stale. The rival is
// played by a curl on the PATH that writes first, once, when the recipe
// sends its transaction.
func TestConsulRecipeCheckAndSet(t *testing.T) {
	c := testcluster.StartConsul(t, testcluster.ConsulOptions{Servers: 1})
	addr := "http://" + c.HTTPAddr(0)
	realCurl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("no curl")
	}
	dir := t.TempDir()
	wrapper := `#!/bin/sh
case "$*" in
*/v1/txn*)
	if [ ! -e "` + dir + `/rival" ]; then
		: > "` + dir + `/rival"
		"` + realCurl + `" -sS -o /dev/null -X PUT --data 200 "` + addr + `/v1/kv/leaderrun-fence/recipe-cas"
		"` + realCurl + `" -sS -o /dev/null -X PUT --data rival "` + addr + `/v1/kv/recipes/consul-cas"
	fi
	;;
esac
exec "` + realCurl + `" "$@"
`
	if err := os.WriteFile(filepath.Join(dir, "curl"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + dir + ":" + jobPath(t), "LEADER_KEY=recipe-cas", "LEADER_EPOCH=100", "CONSUL_HTTP_ADDR=" + c.HTTPAddr(0)}
	code, out := sh(t, env, "consul-fence.sh put recipes/consul-cas mine")
	if _, err := os.Stat(filepath.Join(dir, "rival")); err != nil {
		t.Fatalf("the rival never wrote: %v (exit %d: %s)", err, code, out)
	}
	if code != 1 {
		t.Errorf("epoch 100 after epoch 200 moved the fence: exit %d, want 1 (stale): %s", code, out)
	}
	_, got := sh(t, []string{"PATH=" + jobPath(t)}, "curl -sS '"+addr+"/v1/kv/recipes/consul-cas?raw&consistent'")
	if got != "rival" {
		t.Errorf("the value is %q, want the rival's", got)
	}
}
