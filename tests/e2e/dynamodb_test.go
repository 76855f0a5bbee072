package e2e

import (
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker/observe"
	"github.com/leaderrun/leaderrun/tests/chaos"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// dynTTL and the timeline the DynamoDB tests use: a standby takes a
// silent holder over after 3s + 250ms of seeing no change, reading the
// item every 300ms.
const dynTTL = 3 * time.Second

func dynArgs(endpoint, key string, extra ...string) []string {
	args := []string{"--backend", "dynamodb", "--dynamodb-endpoint", endpoint, "--dynamodb-create-table", "--key", key,
		"--ttl", "3s", "--renew-interval", "500ms", "--kill-grace", "1s", "--safety-margin", "500ms", "--log-level", "debug"}
	return append(args, extra...)
}

// TestDynamoDB runs on dynalite with fake credentials (set for every
// leaderrun it starts; hence no t.Parallel).
func TestDynamoDB(t *testing.T) {
	d := testcluster.StartDynalite(t)
	d.SetEnv(t)
	ep := d.Endpoint()

	t.Run("kill -9 fails over through the guard", func(t *testing.T) {
		// The guard is leaderrun itself, which frees the item once the
		// job is gone; the standby sees it at its next read.
		failoverAfterKill9Guarded(t, dynArgs(ep, newKey("kill9")), 2*time.Second, false)
	})
	t.Run("graceful handoff", func(t *testing.T) {
		gracefulHandoff(t, dynArgs(ep, newKey("handoff")))
	})
	t.Run("leader cut off: its child dies within the TTL, the standby leads after TTL + allowance", func(t *testing.T) {
		px, err := chaos.NewProxy(d.Addr(), chaos.Raw)
		if err != nil {
			t.Fatal(err)
		}
		defer px.Close()
		key := newKey("cut")
		dir := t.TempDir()
		a := startHost(t, dir, "a", "b", dynArgs("http://"+px.Addr(), key))
		a.waitStarted(t, 30*time.Second)
		b := startHost(t, dir, "b", "a", dynArgs(ep, key))
		waitFor(t, 10*time.Second, "b to campaign", func() bool { return strings.Contains(b.p.Output(), "campaigning") })
		time.Sleep(time.Second)
		px.Cut(chaos.Blackhole)
		cut := time.Now()
		b.waitStarted(t, dynTTL+10*time.Second)
		aEnd, bStart := a.stamp(t, "end"), b.stamp(t, "start")
		t.Logf("cut -> old child ended %v, new child started %v", aEnd.Sub(cut).Round(time.Millisecond), bStart.Sub(cut).Round(time.Millisecond))
		if aEnd.After(cut.Add(dynTTL)) {
			t.Errorf("old child ended %v after the cut, past its deadline (TTL %v)", aEnd.Sub(cut), dynTTL)
		}
		if min := dynTTL + observe.Allowance(dynTTL) - 500*time.Millisecond; bStart.Sub(cut) < min {
			t.Errorf("standby led %v after the cut, before TTL + allowance - renew interval (%v)", bStart.Sub(cut), min)
		}
		if !bStart.After(aEnd) {
			t.Errorf("standby's child started before the old child ended")
		}
		b.noOverlap(t)
		if eb, ea := b.epoch(t), a.epoch(t); eb <= ea {
			t.Errorf("epoch after takeover %d, want > %d", eb, ea)
		}
		if code := a.p.Wait(20 * time.Second); code != 123 {
			t.Errorf("cut-off leader exit %d, want 123\n%s", code, a.p.Output())
		}
		b.p.Signal(syscall.SIGTERM)
		b.p.Wait(10 * time.Second)
	})
	t.Run("no-wait while held exits 124; status and check", func(t *testing.T) {
		key := newKey("nowait")
		dir := t.TempDir()
		a := startHost(t, dir, "a", "b", dynArgs(ep, key))
		a.waitStarted(t, 30*time.Second)
		p := start(t, "nowait", nil, append(dynArgs(ep, key, "--no-wait"), "--", "touch", dir+"/ran")...)
		if code := p.Wait(15 * time.Second); code != 124 {
			t.Fatalf("exit %d, want 124\n%s", code, p.Output())
		}
		if ranFileDyn(dir) {
			t.Fatal("the no-wait child ran")
		}
		st := exec.Command(binary, "status", "--backend", "dynamodb", "--dynamodb-endpoint", ep, "--key", key)
		out, err := st.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "a") {
			t.Fatalf("status: %v\n%s", err, out)
		}
		epoch := strconv.FormatUint(a.epoch(t), 10)
		ck := exec.Command(binary, "check", "--backend", "dynamodb", "--dynamodb-endpoint", ep, "--key", key, "--epoch", epoch)
		if out, err := ck.CombinedOutput(); err != nil {
			t.Fatalf("check --epoch %s: %v\n%s", epoch, err, out)
		}
		a.p.Signal(syscall.SIGTERM)
		a.p.Wait(10 * time.Second)
	})

	// What cannot work gives one line and 125, and runs nothing.
	for _, tc := range []struct {
		name, want string
		args       []string
		bound      time.Duration
		env        []string
	}{
		{"unreachable endpoint, no-wait", "127.0.0.1:1", []string{"--backend", "dynamodb", "--dynamodb-endpoint", "http://127.0.0.1:1", "--dynamodb-timeout", "1s", "--no-wait"}, 5 * time.Second, nil},
		{"missing table", "--dynamodb-table", []string{"--backend", "dynamodb", "--dynamodb-endpoint", ep, "--dynamodb-table", "no-such-table"}, 10 * time.Second, nil},
		{"bad endpoint", "--dynamodb-endpoint", []string{"--backend", "dynamodb", "--dynamodb-endpoint", "127.0.0.1:1"}, 5 * time.Second, nil},
		{"no credentials", "no usable credentials", []string{"--backend", "dynamodb", "--dynamodb-endpoint", ep}, 5 * time.Second,
			[]string{"AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY="}},
		{"no region", "--dynamodb-region", []string{"--backend", "dynamodb", "--dynamodb-endpoint", ep}, 5 * time.Second, []string{"AWS_REGION=", "AWS_DEFAULT_REGION="}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			begin := time.Now()
			p := start(t, "refused", tc.env, append(append(tc.args, "--key", newKey("refused")), "--", "touch", dir+"/ran")...)
			code := p.Wait(tc.bound + 10*time.Second)
			took := time.Since(begin)
			out := strings.TrimSpace(p.Output())
			var errLines []string
			for _, l := range strings.Split(out, "\n") {
				if strings.Contains(l, "[ERROR]") || strings.HasPrefix(l, "leaderrun:") {
					errLines = append(errLines, l)
				}
			}
			t.Logf("exit %d after %v: %s", code, took.Round(time.Millisecond), strings.Join(errLines, " | "))
			if code != 125 || len(errLines) != 1 || !strings.Contains(errLines[0], tc.want) {
				t.Fatalf("exit %d, want 125 and one error line naming %q:\n%s", code, tc.want, out)
			}
			if took > tc.bound {
				t.Errorf("took %v, want within %v", took, tc.bound)
			}
			if ranFileDyn(dir) {
				t.Fatal("the child ran")
			}
		})
	}
}

func ranFileDyn(dir string) bool {
	return exec.Command("test", "-e", dir+"/ran").Run() == nil
}
