//go:build linux

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker/kubernetes/kubewire"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// frozenPredecessor: a leader a and two standbys, f queued first and c
// behind it. f is frozen (SIGSTOP), then a is killed -9 (its guard
// releases). c still takes over, once f's queue entry has been silent for
// the TTL + allowance, and never while a's child lives; f, resumed, does
// not start its child while c leads.
func frozenPredecessor(t *testing.T, args []string, ttl time.Duration) {
	dir := t.TempDir()
	a := startHost(t, dir, "a", "c", args)
	a.waitStarted(t, 30*time.Second)
	f := startHost(t, dir, "f", "a", args)
	waitFor(t, 10*time.Second, "f to campaign", func() bool { return strings.Contains(f.p.Output(), "waiting for the holder") })
	time.Sleep(time.Second) // f's entry first in the queue
	c := startHost(t, dir, "c", "a", args)
	waitFor(t, 10*time.Second, "c to campaign", func() bool { return strings.Contains(c.p.Output(), "waiting for the holder") })
	time.Sleep(time.Second)

	f.p.Signal(syscall.SIGSTOP)
	frozen := time.Now()
	aPid := readPID(t, a.file("pid"))
	a.p.Signal(syscall.SIGKILL)
	allowance := max(ttl/20, 250*time.Millisecond)
	bound := ttl + allowance + 3*time.Second
	c.waitStarted(t, bound+5*time.Second)
	took := c.stamp(t, "start").Sub(frozen)
	t.Logf("predecessor frozen, leader killed -> c's child started: %v (TTL + allowance %v)", took.Round(time.Millisecond), ttl+allowance)
	if took > bound {
		t.Errorf("c's child started %v after its predecessor froze, want within %v", took, bound)
	}
	if alive(aPid) {
		t.Error("old child still alive")
	}
	c.noOverlap(t)
	if ea, ec := a.epoch(t), c.epoch(t); ec <= ea {
		t.Errorf("epoch after failover %d, want > %d", ec, ea)
	}
	f.p.Signal(syscall.SIGCONT)
	time.Sleep(2 * time.Second)
	if f.started() {
		t.Error("the resumed standby started its child while c leads")
	}
}

func TestConsulQueue(t *testing.T) {
	c := testcluster.StartConsul(t, testcluster.ConsulOptions{Servers: 1})
	frozenPredecessor(t, consulArgs(c.HTTPAddr(0), newKey("queue")), consulTTL)
}

func TestKubernetesQueue(t *testing.T) {
	e := testcluster.StartEtcd(t, 1)
	k := testcluster.StartKube(t, e, testcluster.KubeUser{Name: "nobody"})
	admin := k.Kubeconfig(t, k.Token(testcluster.KubeAdmin), "")
	frozenPredecessor(t, kubeArgs(admin, newKey("queue")), kubeTTL)
}

// herdAfterKill9: a leader and five standbys; after the leader's kill -9
// (its guard releases) one standby takes over, and attempts() (counted by
// the server, or by a proxy in front of it) grows by at most want: only the
// head of the queue tried.
func herdAfterKill9(t *testing.T, args []string, attempts func() int, want int) {
	dir := t.TempDir()
	a := startHost(t, dir, "a", "x", args)
	a.waitStarted(t, 30*time.Second)
	var standbys []*host
	for i := range 5 {
		h := startHost(t, dir, fmt.Sprintf("s%d", i), "a", args)
		waitFor(t, 10*time.Second, h.name+" to campaign", func() bool { return strings.Contains(h.p.Output(), "waiting for the holder") })
		standbys = append(standbys, h)
	}
	time.Sleep(time.Second)
	before := attempts()
	a.p.Signal(syscall.SIGKILL)
	var next *host
	waitFor(t, 15*time.Second, "a standby's child to start", func() bool {
		for _, h := range standbys {
			if h.started() {
				next = h
				return true
			}
		}
		return false
	})
	time.Sleep(time.Second) // any other standby would have tried by now
	got := attempts() - before
	t.Logf("after the leader's kill -9: %s leads; the counter grew by %d", next.name, got)
	if got > want {
		t.Errorf("the counter grew by %d after the leader's kill -9, want at most %d (only the head of the queue tries)", got, want)
	}
	for _, h := range standbys {
		if h != next && h.started() {
			t.Errorf("%s started its child as well", h.name)
		}
	}
}

// acquireCounter is a proxy in front of Consul's HTTP API that counts the
// transactions that lock a key: acquire attempts (heartbeats are plain
// check-and-sets).
func acquireCounter(t *testing.T, target string) (addr string, n func() int) {
	var count atomic.Int64
	u, _ := url.Parse("http://" + target)
	rp := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/txn" {
			body, _ := io.ReadAll(r.Body)
			if bytes.Contains(bytes.ToLower(body), []byte(`"verb":"lock"`)) {
				count.Add(1)
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), func() int { return int(count.Load()) }
}

func TestConsulQueueHerd(t *testing.T) {
	c := testcluster.StartConsul(t, testcluster.ConsulOptions{Servers: 1})
	addr, n := acquireCounter(t, c.HTTPAddr(0))
	herdAfterKill9(t, consulArgs(addr, newKey("herd")), n, 1)
}

func TestKubernetesQueueHerd(t *testing.T) {
	e := testcluster.StartEtcd(t, 1)
	k := testcluster.StartKube(t, e, testcluster.KubeUser{Name: "nobody"})
	admin := k.Kubeconfig(t, k.Token(testcluster.KubeAdmin), "")
	// Every write to take the Lease but the winner's is a conflict (409):
	// kube-apiserver counts them in apiserver_request_total.
	conflicts := func() int {
		_, body := k.Do(t, http.MethodGet, "/metrics", nil)
		n := 0.0
		for _, line := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(line, "apiserver_request_total{") && strings.Contains(line, `resource="leases"`) &&
				strings.Contains(line, `code="409"`) {
				v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
				n += v
			}
		}
		return int(n)
	}
	herdAfterKill9(t, kubeArgs(admin, newKey("herd")), conflicts, 0)
}

// TestConsulQueueKeyBeneath: a key may be named like a place in another
// key's queue, "<key>/.queue/x", and its lock key must never count as a
// candidate of <key>. Holder a and standby b lead and wait on
// "<key>/.queue/x" with a long TTL (a heartbeat every 20s); c campaigns for
// <key> with a 10s TTL. c must get <key> at once, and b must never start
// its child while a's runs.
func TestConsulQueueKeyBeneath(t *testing.T) {
	c := testcluster.StartConsul(t, testcluster.ConsulOptions{Servers: 1})
	base := newKey("beneath")
	long := []string{"--backend", "consul", "--consul-addr", c.HTTPAddr(0), "--key", base + "/.queue/x",
		"--ttl", "60s", "--renew-interval", "20s", "--kill-grace", "2s", "--safety-margin", "1s"}
	dir := t.TempDir()
	a := startHost(t, dir, "a", "b", long)
	a.waitStarted(t, 30*time.Second)
	b := startHost(t, dir, "b", "a", long)
	waitFor(t, 10*time.Second, "b to campaign", func() bool { return strings.Contains(b.p.Output(), "waiting for the holder") })
	k := startHost(t, dir, "k", "none", consulArgs(c.HTTPAddr(0), base))
	started := time.Now()
	// Until well past the point where <key>'s candidate, reading b's queue
	// entry and a's lock key as places in its queue, would have taken
	// each for silent (TTL + allowance unchanged; a writes every 20s).
	deadline := time.Now().Add(2*consulTTL + 25*time.Second)
	for time.Now().Before(deadline) && !b.started() {
		time.Sleep(200 * time.Millisecond)
	}
	if b.started() {
		t.Errorf("b's child started while a leads")
	}
	if !k.started() {
		t.Fatalf("k's child has not started %v after k was, with nobody holding its key", time.Since(started).Round(time.Second))
	}
	if took := k.stamp(t, "start").Sub(started); took > 5*time.Second {
		t.Errorf("k's child started %v after k, with nobody holding its key; want within 5s", took.Round(time.Millisecond))
	}
	b.noOverlap(t)
}

// entriesGoAtTerm: a standby stopped by SIGTERM while it waits in the queue
// leaves no entry behind; entries() counts them on the server.
func entriesGoAtTerm(t *testing.T, args []string, entries func() int) {
	a, b := pair(t, args)
	waitFor(t, 10*time.Second, "b's queue entry", func() bool { return entries() == 1 })
	b.p.Signal(syscall.SIGTERM)
	if code := b.p.Wait(10 * time.Second); code == 0 {
		t.Errorf("the standby exited 0 after SIGTERM")
	}
	if n := entries(); n != 0 {
		t.Errorf("%d queue entries left after the only standby's SIGTERM, want 0", n)
	}
	if b.started() {
		t.Error("the standby's child started")
	}
	a.p.Signal(syscall.SIGTERM)
	a.p.Wait(10 * time.Second)
}

func TestConsulQueueEntryGoesAtTerm(t *testing.T) {
	c := testcluster.StartConsul(t, testcluster.ConsulOptions{Servers: 1})
	key := newKey("term")
	entriesGoAtTerm(t, consulArgs(c.HTTPAddr(0), key), func() int {
		req, _ := http.NewRequest(http.MethodGet, "http://"+c.HTTPAddr(0)+"/v1/kv/leaderrun/"+key+"/~queue/?keys", nil)
		req.Header.Set("X-Consul-Token", c.ManagementToken())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var keys []string
		_ = json.NewDecoder(resp.Body).Decode(&keys)
		return len(keys)
	})
}

func TestKubernetesQueueEntryGoesAtTerm(t *testing.T) {
	e := testcluster.StartEtcd(t, 1)
	k := testcluster.StartKube(t, e, testcluster.KubeUser{Name: "nobody"})
	admin := k.Kubeconfig(t, k.Token(testcluster.KubeAdmin), "")
	entriesGoAtTerm(t, kubeArgs(admin, newKey("term")), func() int {
		_, body := k.Do(t, http.MethodGet, "/apis/coordination.k8s.io/v1/namespaces/default/leases?labelSelector="+url.QueryEscape(kubewire.AnnPrefix+"queue"), nil)
		var list struct {
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(body, &list); err != nil {
			t.Fatalf("leases: %v: %s", err, body)
		}
		return len(list.Items)
	})
}

// TestConsulStatusNeverUsedWithQueueEntries: entries in the candidates'
// queue alone (a candidate killed before its first acquire leaves one) do
// not make a key read as used: status still exits 3.
func TestConsulStatusNeverUsedWithQueueEntries(t *testing.T) {
	c := testcluster.StartConsul(t, testcluster.ConsulOptions{Servers: 1})
	key := newKey("queueonly")
	req, _ := http.NewRequest(http.MethodPut, "http://"+c.HTTPAddr(0)+"/v1/kv/leaderrun/"+key+"/~queue/gone", strings.NewReader("left behind"))
	req.Header.Set("X-Consul-Token", c.ManagementToken())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("put the entry: %s", resp.Status)
	}
	code, _, errOut, _ := runOnce(t, nil, "status", "--backend", "consul", "--consul-addr", c.HTTPAddr(0), key)
	if code != 3 || !strings.Contains(errOut, "never used") {
		t.Fatalf("status of a key with only a queue entry: exit %d, %q; want exit 3, never used", code, errOut)
	}
}
