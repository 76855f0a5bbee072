package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testcluster"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// consulTTL is Consul's minimum session TTL; the tests' kill point is the
// last renewal send + 9s.
const consulTTL = 10 * time.Second

func consulArgs(addr, key string, extra ...string) []string {
	args := []string{"--backend", "consul", "--consul-addr", addr, "--key", key,
		"--ttl", "10s", "--renew-interval", "2s", "--kill-grace", "2s", "--safety-margin", "1s"}
	return append(args, extra...)
}

// consulHTTP calls Consul's HTTP API.
func consulHTTP(t *testing.T, method, url, token string, out any) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("X-Consul-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %s", method, url, resp.Status)
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}
}

// sessionOf reads the session holding the key.
func sessionOf(t *testing.T, addr, key string) string {
	t.Helper()
	var pairs []struct{ Session string }
	consulHTTP(t, http.MethodGet, "http://"+addr+"/v1/kv/leaderrun/"+key, "", &pairs)
	if len(pairs) == 0 || pairs[0].Session == "" {
		t.Fatalf("key %s has no session", key)
	}
	return pairs[0].Session
}

func TestConsul(t *testing.T) {
	c := testcluster.StartConsul(t, testcluster.ConsulOptions{Servers: 1})
	addr := c.HTTPAddr(0)

	t.Run("kill -9 fails over fast", func(t *testing.T) {
		t.Parallel()
		// The guard releases the session: no waiting for the TTL.
		failoverAfterKill9Guarded(t, consulArgs(addr, newKey("kill9")), 2*time.Second, true)
	})
	t.Run("graceful handoff", func(t *testing.T) {
		t.Parallel()
		gracefulHandoff(t, consulArgs(addr, newKey("handoff")))
	})
	t.Run("frozen leader", func(t *testing.T) {
		t.Parallel()
		// Consul expires a session between TTL and 2 x TTL, then the
		// lock-delay (by default the TTL) runs.
		frozenLeader(t, consulArgs(addr, newKey("frozen")), 3*consulTTL+5*time.Second)
	})
	t.Run("key deleted by hand", func(t *testing.T) {
		t.Parallel()
		key := newKey("deleted")
		keyDeletedByHand(t, consulArgs(addr, key), func() {
			consulHTTP(t, http.MethodDelete, "http://"+addr+"/v1/kv/leaderrun/"+key, "", nil)
		}, consulTTL)
	})
	t.Run("session destroyed by hand", func(t *testing.T) {
		t.Parallel()
		key := newKey("destroyed")
		keyDeletedByHand(t, consulArgs(addr, key), func() {
			consulHTTP(t, http.MethodPut, "http://"+addr+"/v1/session/destroy/"+sessionOf(t, addr, key), "", nil)
		}, consulTTL)
	})
	t.Run("unreachable agent ends at the acquire timeout", func(t *testing.T) {
		t.Parallel()
		unreachableIsAnOutage(t, consulArgs("127.0.0.1:1", newKey("unreach"), "--acquire-timeout", "2s"))
	})
	t.Run("TTL below Consul's minimum is a usage error", func(t *testing.T) {
		t.Parallel()
		p := start(t, "short ttl", nil, append(consulArgs(addr, newKey("ttl"), "--ttl", "5s", "--renew-interval", "1s", "--kill-grace", "1s"), "--", "true")...)
		if code := p.Wait(10 * time.Second); code != 125 {
			t.Fatalf("exit %d, want 125\n%s", code, p.Output())
		}
		if !strings.Contains(p.Output(), "--ttl") {
			t.Fatalf("error does not name --ttl:\n%s", p.Output())
		}
	})
}

func TestConsulACL(t *testing.T) {
	c := testcluster.StartConsul(t, testcluster.ConsulOptions{Servers: 1, ACL: true})
	addr := c.HTTPAddr(0)
	readOnly := c.CreateToken(t, `key_prefix "" { policy = "read" }
session_prefix "" { policy = "write" }`)
	writer := c.CreateToken(t, `key_prefix "leaderrun/" { policy = "write" }
session_prefix "" { policy = "write" }`)

	p := start(t, "no write", nil, append(consulArgs(addr, newKey("acl"), "--consul-token", readOnly, "--acquire-timeout", "20s"), "--", "true")...)
	began := time.Now()
	if code := p.Wait(30 * time.Second); code != 125 {
		t.Fatalf("exit %d with a read-only token, want 125\n%s", code, p.Output())
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("a denied token took %v to be refused; it retried?", took)
	}
	if strings.Contains(p.Output(), readOnly) {
		t.Errorf("the token appears in the output:\n%s", p.Output())
	}
	if !strings.Contains(strings.ToLower(p.Output()), "denied") && !strings.Contains(strings.ToLower(p.Output()), "permission") {
		t.Errorf("the error does not say permission was denied:\n%s", p.Output())
	}

	// A token given by flag reaches neither the log nor the child.
	dir := t.TempDir()
	ok := start(t, "writer", nil, append(consulArgs(addr, newKey("acl"), "--consul-token", writer, "--log-level", "trace"),
		"--", "sh", "-c", "env > "+dir+"/env")...)
	if code := ok.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d with a write token\n%s", code, ok.Output())
	}
	env, _ := os.ReadFile(dir + "/env")
	if strings.Contains(string(env), writer) {
		t.Error("a token given by flag reached the child's environment")
	}
	if strings.Contains(ok.Output(), writer) {
		t.Errorf("the token appears in the log:\n%s", ok.Output())
	}

	// A token file: warned about when others than its owner may read it.
	for mode, warn := range map[os.FileMode]bool{0o600: false, 0o640: true} {
		file := testsupport.WriteFile(t, filepath.Join(dir, fmt.Sprintf("token-%o", mode)), writer+"\n", mode)
		p := start(t, "token file", nil, append(consulArgs(addr, newKey("acl"), "--consul-token-file", file), "--", "true")...)
		if code := p.Wait(30 * time.Second); code != 0 {
			t.Fatalf("exit %d with a token file of mode %o\n%s", code, mode, p.Output())
		}
		if got := strings.Contains(p.Output(), "readable by others"); got != warn {
			t.Errorf("token file of mode %o: warned %v, want %v\n%s", mode, got, warn, p.Output())
		}
		wantNoSecret(t, writer, p)
	}

	// One already in leaderrun's environment is the operator's to pass on.
	inherited := start(t, "inherited", []string{"CONSUL_HTTP_TOKEN=" + writer}, append(consulArgs(addr, newKey("acl")),
		"--", "sh", "-c", "env > "+dir+"/env2")...)
	if code := inherited.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d with the token in the environment\n%s", code, inherited.Output())
	}
	env2, _ := os.ReadFile(dir + "/env2")
	if !strings.Contains(string(env2), "CONSUL_HTTP_TOKEN="+writer) {
		t.Error("a token from leaderrun's own environment was not inherited")
	}
}

func TestConsulCluster(t *testing.T) {
	c := testcluster.StartConsul(t, testcluster.ConsulOptions{Servers: 3})

	// Find the Raft leader and talk to another server.
	var leader string
	consulHTTP(t, http.MethodGet, "http://"+c.HTTPAddr(0)+"/v1/status/leader", "", &leader)
	leaderIdx, clientIdx := -1, -1
	for i := range 3 {
		var self struct {
			DebugConfig struct{ ServerPort int }
		}
		consulHTTP(t, http.MethodGet, "http://"+c.HTTPAddr(i)+"/v1/agent/self", "", &self)
		if strings.HasSuffix(leader, ":"+strconvItoa(int64(self.DebugConfig.ServerPort))) {
			leaderIdx = i
		} else if clientIdx < 0 {
			clientIdx = i
		}
	}
	if leaderIdx < 0 || clientIdx < 0 {
		t.Fatalf("cannot tell the Raft leader (%q) among the servers", leader)
	}
	addr := c.HTTPAddr(clientIdx)

	// The Raft leader dies: leadership and child survive the election.
	dir := t.TempDir()
	a := startHost(t, dir, "a", "b", consulArgs(addr, newKey("raft"), "--log-level", "debug"))
	pid := a.waitStarted(t, 30*time.Second)
	c.Kill(leaderIdx)
	deadline := time.Now().Add(2 * consulTTL)
	for time.Now().Before(deadline) {
		if !alive(pid) || a.p.Exited() {
			t.Fatalf("child or leaderrun died after the Raft leader was killed\n%s", a.p.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Every server stops: the child is dead before the last renewal + TTL.
	for i := range 3 {
		if i != leaderIdx {
			c.Stop(i)
		}
	}
	if code := a.p.Wait(3 * consulTTL); code != 123 {
		t.Fatalf("exit %d after all servers stopped, want 123\n%s", code, a.p.Output())
	}
	lastRenewal := lastLogTime(t, a.p.Output(), "renewed")
	died := a.stamp(t, "end")
	if limit := lastRenewal.Add(consulTTL); !died.Before(limit) {
		t.Fatalf("child died at %v, after last renewal + ttl (%v)", died, limit)
	}
	t.Logf("servers gone: child died %v before the last renewal + ttl", lastRenewal.Add(consulTTL).Sub(died).Round(time.Millisecond))
}

// TestConsulAddressList gives leaderrun every server's address: losing the
// server it talks to costs nothing, and losing quorum still stops the child
// before the last renewal + TTL.
func TestConsulAddressList(t *testing.T) {
	c := testcluster.StartConsul(t, testcluster.ConsulOptions{Servers: 3})
	list := strings.Join(c.Addrs(), ",")
	dir := t.TempDir()
	key := newKey("list")
	a := startHost(t, dir, "a", "b", consulArgs(list, key, "--log-level", "debug"))
	pid := a.waitStarted(t, 30*time.Second)
	epoch := a.epoch(t)

	// The first address is the one in use: kill -9 it.
	c.Kill(0)
	deadline := time.Now().Add(2 * consulTTL)
	for time.Now().Before(deadline) {
		if !alive(pid) || a.p.Exited() {
			t.Fatalf("child or leaderrun died after the server in use was killed\n%s", a.p.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(a.p.Output(), "moving to the next address") {
		t.Fatalf("leaderrun never moved off the killed server\n%s", a.p.Output())
	}
	code, out, errOut, _ := runOnce(t, nil, "status", "--json", "--backend", "consul", "--consul-addr", list, "--key", key)
	var st statusJSON
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || st.Leader == nil || st.Leader.Epoch != epoch {
		t.Fatalf("status after the kill: exit %d, %q %s (%v), want epoch %d", code, out, errOut, err, epoch)
	}
	code, _, errOut, _ = runOnce(t, nil, "check", "--epoch", strconvItoa(int64(epoch)), "--backend", "consul", "--consul-addr", list, "--key", key)
	if code != 0 {
		t.Fatalf("check --epoch %d after the kill: exit %d %s", epoch, code, errOut)
	}

	// A second server stops: no quorum. The child is dead before the last
	// renewal + TTL, and leaderrun exits 123.
	c.Stop(1)
	if code := a.p.Wait(3 * consulTTL); code != 123 {
		t.Fatalf("exit %d after quorum was lost, want 123\n%s", code, a.p.Output())
	}
	lastRenewal := lastLogTime(t, a.p.Output(), "renewed")
	died := a.stamp(t, "end")
	if limit := lastRenewal.Add(consulTTL); !died.Before(limit) {
		t.Fatalf("child died at %v, after last renewal + ttl (%v)", died, limit)
	}
	t.Logf("quorum lost: child died %v before the last renewal + ttl", lastRenewal.Add(consulTTL).Sub(died).Round(time.Millisecond))
}

// TestConsulObserverTakeover: every request of the leader fails except its
// session renewals (so the heartbeat, the watch and the release fail, and
// the session stays alive), or except its heartbeat writes (which it then
// never sends: a renewal starts with the session). Its renewals fail, so
// it stops its child at its deadline and exits 123, unable to release;
// the standby takes over one TTL (+ allowance) after the last heartbeat it
// saw, never while the old child runs, with a higher epoch. With the
// session alive, Consul alone would never have freed the key.
func TestConsulObserverTakeover(t *testing.T) {
	c := testcluster.StartConsul(t, testcluster.ConsulOptions{Servers: 1})
	for _, tc := range []struct{ name, only string }{
		{"only session renewals pass", "/v1/session/renew/"},
		{"only heartbeats pass", "/v1/txn"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			proxy := testsupport.NewFaultyHTTP(t, c.HTTPAddr(0))
			key := newKey("observe")
			dir := t.TempDir()
			a := startHost(t, dir, "a", "b", consulArgs(proxy.Addr, key, "--log-level", "debug"))
			a.waitStarted(t, 30*time.Second)
			b := startHost(t, dir, "b", "a", consulArgs(c.HTTPAddr(0), key))
			waitFor(t, 10*time.Second, "b to campaign", func() bool { return strings.Contains(b.p.Output(), "waiting for the holder") })
			time.Sleep(consulTTL / 2) // b watches a few heartbeats first
			if b.started() {
				t.Fatal("the standby's child started while the leader renewed")
			}

			proxy.FailExcept(tc.only)
			cut := time.Now()
			b.waitStarted(t, 3*consulTTL)
			took := b.stamp(t, "start").Sub(cut)
			if code := a.p.Wait(10 * time.Second); code != 123 {
				t.Fatalf("old leader exit %d, want 123\n%s", code, a.p.Output())
			}
			b.noOverlap(t)
			if end, start := a.stamp(t, "end"), b.stamp(t, "start"); !end.Before(start) {
				t.Fatalf("the standby's child started %v before the old child ended", end.Sub(start))
			}
			if ea, eb := a.epoch(t), b.epoch(t); eb <= ea {
				t.Fatalf("epoch after takeover %d, want > %d", eb, ea)
			}
			lastRenewal := lastLogTime(t, a.p.Output(), "renewed")
			since := b.stamp(t, "start").Sub(lastRenewal)
			t.Logf("%s: standby's child started %v after the fault, %v after the leader's last renewal",
				tc.name, took.Round(time.Millisecond), since.Round(time.Millisecond))
			if since < consulTTL {
				t.Fatalf("the standby's child started %v after the leader's last renewal, before its TTL (%v) ran out", since, consulTTL)
			}
			if took > consulTTL+3*time.Second {
				t.Errorf("takeover took %v after the fault; want about one TTL", took)
			}
		})
	}
}
