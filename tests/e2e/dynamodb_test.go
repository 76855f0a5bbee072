package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

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
		// job is gone; the standby sees it at its next read (TTL/10).
		failoverAfterKill9Guarded(t, dynArgs(ep, newKey("kill9")), 2*time.Second, false)
	})
	t.Run("graceful handoff", func(t *testing.T) {
		gracefulHandoff(t, dynArgs(ep, newKey("handoff")))
	})
	t.Run("frozen leader: its guard stops the child and frees the item", func(t *testing.T) {
		frozenLeader(t, dynArgs(ep, newKey("frozen")), dynTTL+10*time.Second)
	})
	t.Run("leader cut off: its child dies within the TTL, the standby leads after TTL + allowance", func(t *testing.T) {
		key := newKey("cut")
		_, b := cutOffLeader(t, t.TempDir(), d.Addr(), func(px string) []string { return dynArgs("http://"+px, key) }, dynArgs(ep, key), dynTTL, 500*time.Millisecond)
		stopHost(t, b)
	})
	t.Run("epoch grows across releases, re-acquires and a takeover", func(t *testing.T) {
		key := newKey("epochs")
		dir := t.TempDir()
		once := func() uint64 {
			t.Helper()
			p := start(t, "once", nil, append(dynArgs(ep, key), "--", "sh", "-c", "echo $LEADER_EPOCH > "+dir+"/once.epoch")...)
			if code := p.Wait(30 * time.Second); code != 0 {
				t.Fatalf("one-shot run: exit %d\n%s", code, p.Output())
			}
			return (&host{name: "once", dir: dir}).epoch(t)
		}
		e1, e2 := once(), once()
		a, b := cutOffLeader(t, dir, d.Addr(), func(px string) []string { return dynArgs("http://"+px, key) }, dynArgs(ep, key), dynTTL, 500*time.Millisecond)
		stopHost(t, b)
		e5 := once()
		got := []uint64{e1, e2, a.epoch(t), b.epoch(t), e5}
		t.Logf("epochs: run, run again, leader cut off, standby that took over, run after its release: %v", got)
		for i := 1; i < len(got); i++ {
			if got[i] <= got[i-1] {
				t.Errorf("epoch %d after %d (%v): want strictly growing", got[i], got[i-1], got)
			}
		}
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
		if ranFile(dir) {
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

	// What cannot work gives one line and 125, and runs nothing. dynalite
	// checks no IAM policy, so the two denials come from a scripted
	// endpoint that answers as DynamoDB does for a role without the
	// permission: none at all, or reads only.
	denied := deniedEndpoint(t, false)
	readOnly := deniedEndpoint(t, true)
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
		{"access denied", "refused by DynamoDB", []string{"--backend", "dynamodb", "--dynamodb-endpoint", denied}, 5 * time.Second, nil},
		{"read-only role", "not authorized to perform: dynamodb:UpdateItem", []string{"--backend", "dynamodb", "--dynamodb-endpoint", readOnly}, 5 * time.Second, nil},
		{"no region", "--dynamodb-region", []string{"--backend", "dynamodb", "--dynamodb-endpoint", ep}, 5 * time.Second, []string{"AWS_REGION=", "AWS_DEFAULT_REGION="}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			refusedOneLine(t, append(tc.args, "--key", newKey("refused")), tc.env, tc.want, tc.bound)
		})
	}
}

// deniedEndpoint is a scripted DynamoDB endpoint for a role that may do
// nothing (every call AccessDeniedException) or, with reads, one that may
// describe the table and read items but not write them.
func deniedEndpoint(t *testing.T, reads bool) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "DynamoDB_20120810.")
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		switch {
		case reads && op == "DescribeTable":
			fmt.Fprint(w, `{"Table":{"TableName":"leaderrun","TableStatus":"ACTIVE","KeySchema":[{"AttributeName":"key","KeyType":"HASH"}]}}`)
		case reads && op == "GetItem":
			fmt.Fprint(w, `{}`)
		default:
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"__type":"com.amazon.coral.service#AccessDeniedException","message":"User: arn:aws:iam::123456789012:user/test is not authorized to perform: dynamodb:%s on resource: leaderrun"}`, op)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}
