package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// TestLocalOtherUsersEnvFileIsRefused: an --env-file that another user
// owns, or may write, would set the environment of root's job (LD_PRELOAD,
// PATH): it is refused with 125 naming --env-file, as a --lock-dir others
// may write is, and the job never starts.
func TestLocalOtherUsersEnvFileIsRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	dir := t.TempDir()
	for _, c := range []struct {
		name  string
		owner int
		mode  os.FileMode
	}{
		{"owned by nobody", testsupport.Nobody, 0o644},
		{"root's, every user may write", 0, 0o666},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := filepath.Join(dir, "job.env")
			if err := os.WriteFile(env, []byte("INJECTED=yes\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(env, c.owner, c.owner); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(env, c.mode); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, "seen")
			_ = os.Remove(out)
			p := start(t, "root's leaderrun", nil, withCommand(localArgs(dir, newKey("envfile"), "--env-file", env), `echo "$INJECTED" > `+out)...)
			code := p.Wait(60 * time.Second)
			b, _ := os.ReadFile(out)
			if strings.TrimSpace(string(b)) == "yes" {
				t.Fatalf("an --env-file %s set root's job's environment (exit %d); want it refused, 125, naming --env-file\n%s", c.name, code, p.Output())
			}
			if code != 125 || !strings.Contains(p.Output(), "--env-file") {
				t.Fatalf("an --env-file %s: exit %d, want 125 naming --env-file\n%s", c.name, code, p.Output())
			}
		})
	}
}
