//go:build linux

package recipes

import (
	"strings"
	"testing"

	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// TestPostgresRecipe: examples/postgres-fence.sql's leaderrun_fence, called
// first in the job's transaction, aborts the transaction of a stale epoch
// and lets the current one's commit.
func TestPostgresRecipe(t *testing.T) {
	pg := testcluster.StartPostgres(t)
	env := []string{"PATH=" + jobPath(t), "DSN=" + pg.DSN()}
	psql := func(t *testing.T, env []string, sql string) (int, string) {
		return sh(t, append(env, "SQL="+sql), `psql "$DSN" -X -q -A -t -v ON_ERROR_STOP=1 -c "$SQL"`)
	}
	if code, out := sh(t, append(env, "FILE="+examples(t)+"/postgres-fence.sql"), `psql "$DSN" -X -q -v ON_ERROR_STOP=1 -f "$FILE"`); code != 0 {
		t.Fatalf("load postgres-fence.sql: exit %d: %s", code, out)
	}
	if code, out := psql(t, env, "CREATE TABLE runs (name text PRIMARY KEY, value text)"); code != 0 {
		t.Fatalf("create table: exit %d: %s", code, out)
	}
	write := func(t *testing.T, jobEnv []string, value string) bool {
		// The recipe as docs/FENCING.md shows it: the fence first, in the
		// transaction of the job's writes.
		code, out := sh(t, append(append(jobEnv, "DSN="+pg.DSN()), "VALUE="+value), `psql "$DSN" -X -q -v ON_ERROR_STOP=1 --single-transaction \
	-v key="$LEADER_KEY" -v epoch="$LEADER_EPOCH" -v value="$VALUE" <<'SQL'
SELECT leaderrun_fence(:'key', :epoch);
INSERT INTO runs VALUES ('last', :'value') ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
SQL`)
		switch {
		case code == 0:
			return true
		case strings.Contains(out, "is stale"):
			t.Logf("rejected: %s", strings.TrimSpace(out))
			return false
		}
		t.Fatalf("psql: exit %d: %s", code, out)
		return false
	}
	read := func(t *testing.T) string {
		code, out := psql(t, env, "SELECT value FROM runs WHERE name = 'last'")
		if code != 0 {
			t.Fatalf("read: exit %d: %s", code, out)
		}
		return strings.TrimSpace(out)
	}
	proveFence(t, localArgs(t, "recipe-pg"), "", []string{"PATH=" + jobPath(t)}, write, read)
}

// TestFrozenHostWritesThroughPostgresRecipe: the frozen-host scenario
// (freeze_test.go) with the job writing through leaderrun_fence, each
// write a row of its own in a table whose serial order is the order the
// writes committed in: no row of the stale epoch after the new leader's
// first.
func TestFrozenHostWritesThroughPostgresRecipe(t *testing.T) {
	pg := testcluster.StartPostgres(t)
	e := testcluster.StartEtcd(t, 1)
	env := []string{"PATH=" + jobPath(t, "etcdctl"), "DSN=" + pg.DSN()}
	if code, out := sh(t, append(env, "FILE="+examples(t)+"/postgres-fence.sql"), `psql "$DSN" -X -q -v ON_ERROR_STOP=1 -f "$FILE"`); code != 0 {
		t.Fatalf("load postgres-fence.sql: exit %d: %s", code, out)
	}
	if code, out := sh(t, env, `psql "$DSN" -X -q -v ON_ERROR_STOP=1 -c 'CREATE TABLE writes (id bigserial PRIMARY KEY, epoch bigint, seq int)'`); code != 0 {
		t.Fatalf("create table: exit %d: %s", code, out)
	}
	write := `out=$(psql "$DSN" -X -q -v ON_ERROR_STOP=1 --single-transaction \
		-v key="$LEADER_KEY" -v epoch="$LEADER_EPOCH" -v seq="$i" 2>&1 <<'SQL'
SELECT leaderrun_fence(:'key', :epoch);
INSERT INTO writes (epoch, seq) VALUES (:epoch, :seq);
SQL
) || case $out in *"is stale"*) exit 1 ;; *) exit 2 ;; esac`
	frozenHost(t, etcdArgs(e, "recipe-pg-freeze"), "", "( "+write+" )", env, func(t *testing.T) []string {
		code, out := sh(t, env, `psql "$DSN" -X -q -A -t -F ' ' -c 'SELECT epoch, seq FROM writes ORDER BY id'`)
		if code != 0 {
			t.Fatalf("read writes: exit %d: %s", code, out)
		}
		return strings.Split(strings.TrimSpace(out), "\n")
	})
}
