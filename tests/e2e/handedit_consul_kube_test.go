package e2e

import (
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// Hand edits of a running leader's record on Consul and Kubernetes
// (DESIGN §1.12, "A record edited by hand"): whatever the edit, the
// standby's child never starts while the leader's child lives. The
// leader's child answers SIGTERM by going on for longer than its kill
// grace, so it lives until the SIGKILL at the end of the grace: a standby
// that took a vanished or emptied record for a free one would start its
// child during that grace.

// slowStopScript is hostScript with a child that ignores the stop signal's
// meaning: it traps it and keeps running until it is killed.
func slowStopScript(dir, name, other string) string {
	s := hostScript(dir, name, other)
	return strings.Replace(s, "trap 'sleep 0.2; date +%s%N > "+filepath.Join(dir, name+".end")+"; exit 0' TERM",
		"trap 'date +%s%N > "+filepath.Join(dir, name+".term")+"; sleep 60' TERM", 1)
}

// startSlowHost is startHost with slowStopScript as the child.
func startSlowHost(t *testing.T, dir, name, other string, args []string) *host {
	t.Helper()
	args = append(append([]string{"--id", name}, args...), "--", "sh", "-c", slowStopScript(dir, name, other))
	return &host{name: name, dir: dir, p: start(t, name, nil, args...)}
}

// handEdited starts a slow-stopping leader a and standby b, lets b watch a
// few renewals, applies edit, and checks that b's child starts only once
// a's child is dead, with a higher epoch, within bound.
func handEdited(t *testing.T, args []string, edit func(), bound time.Duration) {
	t.Helper()
	dir := t.TempDir()
	a := startSlowHost(t, dir, "a", "b", args)
	aPid := a.waitStarted(t, 30*time.Second)
	b := startSlowHost(t, dir, "b", "a", args)
	waitFor(t, 10*time.Second, "b to campaign", func() bool { return strings.Contains(b.p.Output(), "waiting for the holder") })
	time.Sleep(2 * time.Second) // b sees a few renewals
	if b.started() {
		t.Fatal("the standby's child started while the leader renewed")
	}
	edit()
	edited := time.Now()
	b.waitStarted(t, bound)
	b.noOverlap(t)
	if alive(aPid) {
		t.Fatal("the leader's child is alive while the standby's child runs")
	}
	t.Logf("edit -> leader's child told to stop %v, -> standby's child started %v",
		a.stamp(t, "term").Sub(edited).Round(time.Millisecond), b.stamp(t, "start").Sub(edited).Round(time.Millisecond))
	if ea, eb := a.epoch(t), b.epoch(t); eb <= ea {
		t.Errorf("epoch after the edit %d, want > %d", eb, ea)
	}
	if code := a.p.Wait(15 * time.Second); code != 123 {
		t.Errorf("leader exit %d after its record was edited, want 123", code)
	}
	b.p.Signal(syscall.SIGKILL)
	b.p.Wait(10 * time.Second)
}

func TestConsulHandEdits(t *testing.T) {
	c := testcluster.StartConsul(t, testcluster.ConsulOptions{Servers: 1})
	addr := c.HTTPAddr(0)
	args := func(key string) []string {
		return []string{"--backend", "consul", "--consul-addr", addr, "--key", key,
			"--ttl", "10s", "--renew-interval", "2s", "--kill-grace", "1s", "--safety-margin", "1s", "--log-level", "debug"}
	}
	for _, tc := range []struct {
		name string
		edit func(t *testing.T, key string)
	}{
		{"key deleted", func(t *testing.T, key string) {
			consulHTTP(t, http.MethodDelete, "http://"+addr+"/v1/kv/leaderrun/"+key, "", nil)
		}},
		{"key released with the holder's session", func(t *testing.T, key string) {
			consulHTTP(t, http.MethodPut, "http://"+addr+"/v1/kv/leaderrun/"+key+"?release="+sessionOf(t, addr, key), "", nil)
		}},
		{"session destroyed", func(t *testing.T, key string) {
			consulHTTP(t, http.MethodPut, "http://"+addr+"/v1/session/destroy/"+sessionOf(t, addr, key), "", nil)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			key := newKey("handedit")
			handEdited(t, args(key), func() { tc.edit(t, key) }, 3*consulTTL)
		})
	}
}

func TestKubernetesHandEdits(t *testing.T) {
	e := testcluster.StartEtcd(t, 1)
	k := testcluster.StartKube(t, e)
	admin := k.Kubeconfig(t, k.Token(testcluster.KubeAdmin), "")
	const ttl = 6 * time.Second
	args := func(key string) []string {
		return []string{"--backend", "kubernetes", "--kubeconfig", admin, "--k8s-namespace", "default", "--key", key,
			"--ttl", "6s", "--renew-interval", "1s", "--kill-grace", "2s", "--safety-margin", "500ms", "--log-level", "debug"}
	}
	for _, tc := range []struct {
		name string
		edit func(t *testing.T, key string)
	}{
		{"Lease deleted", func(t *testing.T, key string) {
			if code, out := k.Do(t, "DELETE", leasePath(t, key), nil); code != 200 {
				t.Fatalf("delete Lease: %d %s", code, out)
			}
		}},
		{"holderIdentity cleared", func(t *testing.T, key string) {
			editLease(t, k, key, func(_, spec map[string]any) { delete(spec, "holderIdentity") })
		}},
		{"TTL lowered", func(t *testing.T, key string) {
			editLease(t, k, key, func(meta, spec map[string]any) {
				meta["annotations"].(map[string]any)["leaderrun/ttl"] = "1s"
				spec["leaseDurationSeconds"] = 1
			})
		}},
		{"annotations removed", func(t *testing.T, key string) {
			editLease(t, k, key, func(meta, _ map[string]any) { delete(meta, "annotations") })
		}},
		{"emptied", func(t *testing.T, key string) {
			editLease(t, k, key, func(meta, spec map[string]any) {
				delete(meta, "annotations")
				for f := range spec {
					delete(spec, f)
				}
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			key := newKey("handedit")
			handEdited(t, args(key), func() { tc.edit(t, key) }, 3*ttl)
		})
	}
}
