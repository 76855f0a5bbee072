package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker/kubernetes"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// kubeTTL and the timeline the Kubernetes tests use: kill point = last
// renewal send + 2.5s; a standby takes a silent holder over after
// 3s + 250ms of seeing no change.
const kubeTTL = 3 * time.Second

func kubeArgs(kubeconfig, key string, extra ...string) []string {
	args := []string{"--backend", "kubernetes", "--kubeconfig", kubeconfig, "--k8s-namespace", "default", "--key", key,
		"--ttl", "3s", "--renew-interval", "500ms", "--kill-grace", "1s", "--safety-margin", "500ms", "--log-level", "debug"}
	return append(args, extra...)
}

// leasePath is the API path of key's Lease in namespace default.
func leasePath(t *testing.T, key string) string {
	t.Helper()
	name, err := kubernetes.LeaseName("leaderrun", key)
	if err != nil {
		t.Fatal(err)
	}
	return "/apis/coordination.k8s.io/v1/namespaces/default/leases/" + name
}

func TestKubernetes(t *testing.T) {
	e := testcluster.StartEtcd(t, 1)
	k := testcluster.StartKube(t, e, testcluster.KubeUser{Name: "nobody"})
	admin := k.Kubeconfig(t, k.Token(testcluster.KubeAdmin), "")

	t.Run("kill -9 fails over through the guard", func(t *testing.T) {
		t.Parallel()
		// The guard is leaderrun-guard, which clears the Lease itself.
		failoverAfterKill9Guarded(t, kubeArgs(admin, newKey("kill9")), time.Second, true)
	})
	t.Run("graceful handoff", func(t *testing.T) {
		t.Parallel()
		gracefulHandoff(t, kubeArgs(admin, newKey("handoff")))
	})
	t.Run("frozen leader", func(t *testing.T) {
		t.Parallel()
		frozenLeader(t, kubeArgs(admin, newKey("frozen")), kubeTTL+10*time.Second)
	})
	t.Run("Lease deleted by hand, then re-created", func(t *testing.T) {
		t.Parallel()
		key := newKey("deleted")
		dir := t.TempDir()
		a := startHost(t, dir, "a", "c", kubeArgs(admin, key))
		a.waitStarted(t, 30*time.Second)
		if code, out := k.Do(t, "DELETE", leasePath(t, key), nil); code != 200 {
			t.Fatalf("delete Lease: %d %s", code, out)
		}
		removed := time.Now()
		if code := a.p.Wait(kubeTTL + 10*time.Second); code != 123 {
			t.Fatalf("exit %d, want 123\n%s", code, a.p.Output())
		}
		// The child takes 200ms to answer SIGTERM; waiting out the TTL
		// would take far longer. (Measured to the child's exit, not
		// leaderrun's, which also waits for its guard to go.)
		if took := a.stamp(t, "end").Sub(removed); took > kubeTTL/2 {
			t.Fatalf("child stopped %v after the Lease was deleted; it waited for the TTL (%v)?", took, kubeTTL)
		}
		// A new leadership on the re-created Lease (leaseTransitions
		// starts over) still gets a higher epoch.
		c := startHost(t, dir, "c", "a", kubeArgs(admin, key))
		c.waitStarted(t, 30*time.Second)
		c.noOverlap(t)
		if ec, ea := c.epoch(t), a.epoch(t); ec <= ea {
			t.Fatalf("epoch on the re-created Lease %d, want > %d", ec, ea)
		}
		c.p.Signal(syscall.SIGTERM)
		c.p.Wait(10 * time.Second)
	})
	t.Run("no-wait while held exits 124", func(t *testing.T) {
		t.Parallel()
		key := newKey("nowait")
		dir := t.TempDir()
		a := startHost(t, dir, "a", "b", kubeArgs(admin, key))
		a.waitStarted(t, 30*time.Second)
		p := start(t, "nowait", nil, append(kubeArgs(admin, key, "--no-wait"), "--", "touch", dir+"/ran")...)
		if code := p.Wait(15 * time.Second); code != 124 {
			t.Fatalf("exit %d, want 124\n%s", code, p.Output())
		}
		if _, err := os.Stat(dir + "/ran"); err == nil {
			t.Fatal("the no-wait child ran")
		}
		// status and check on the same flags name the leader and its epoch.
		st := exec.Command(binary, "status", "--backend", "kubernetes", "--kubeconfig", admin, "--k8s-namespace", "default", "--key", key)
		out, err := st.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "a") {
			t.Fatalf("status: %v\n%s", err, out)
		}
		epoch := strconv.FormatUint(a.epoch(t), 10)
		ck := exec.Command(binary, "check", "--backend", "kubernetes", "--kubeconfig", admin, "--k8s-namespace", "default", "--key", key, "--epoch", epoch)
		if out, err := ck.CombinedOutput(); err != nil {
			t.Fatalf("check --epoch %s: %v\n%s", epoch, err, out)
		}
		a.p.Signal(syscall.SIGTERM)
		a.p.Wait(10 * time.Second)
	})
	t.Run("SIGTERM while waiting ends within 1s", func(t *testing.T) {
		t.Parallel()
		key := newKey("cancel")
		dir := t.TempDir()
		a := startHost(t, dir, "a", "b", kubeArgs(admin, key))
		a.waitStarted(t, 30*time.Second)
		b := start(t, "standby", nil, append(kubeArgs(admin, key), "--", "touch", dir+"/ran")...)
		waitFor(t, 10*time.Second, "standby to campaign", func() bool { return strings.Contains(b.Output(), "waiting for the holder") })
		time.Sleep(200 * time.Millisecond)
		sent := time.Now()
		b.Signal(syscall.SIGTERM)
		code := b.Wait(5 * time.Second)
		if took := time.Since(sent); took > time.Second {
			t.Errorf("standby took %v to end after SIGTERM", took)
		}
		if code != 143 {
			t.Fatalf("standby exit %d, want 143\n%s", code, b.Output())
		}
		a.p.Signal(syscall.SIGTERM)
		a.p.Wait(10 * time.Second)
	})
	t.Run("RBAC-forbidden token exits 125 without the token", func(t *testing.T) {
		t.Parallel()
		tok := k.Token("nobody")
		dir := t.TempDir()
		p := start(t, "forbidden", nil, append(kubeArgs(k.Kubeconfig(t, tok, ""), newKey("rbac")), "--", "touch", dir+"/ran")...)
		if code := p.Wait(20 * time.Second); code != 125 {
			t.Fatalf("exit %d, want 125\n%s", code, p.Output())
		}
		if !strings.Contains(p.Output(), "not allowed to get leases") {
			t.Errorf("the refusal does not name the verb and resource:\n%s", p.Output())
		}
		if strings.Contains(p.Output(), tok) {
			t.Fatalf("the token appears in the output:\n%s", p.Output())
		}
	})
}

// TestKubernetesServerLoss stops the API server, then the etcd behind it,
// under a running leader: each time the child is dead before the last
// renewal's send time + TTL, and leaderrun exits 123.
func TestKubernetesServerLoss(t *testing.T) {
	e := testcluster.StartEtcd(t, 1)
	k := testcluster.StartKube(t, e)
	admin := k.Kubeconfig(t, k.Token(testcluster.KubeAdmin), "")

	for _, tc := range []struct {
		name    string
		stop    func()
		restart func()
	}{
		{"kube-apiserver stopped", k.Stop, k.Restart},
		{"etcd stopped", func() { e.Stop(0) }, func() { e.Restart(0) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			h := startHost(t, dir, "a", "none", kubeArgs(admin, newKey("loss")))
			pid := h.waitStarted(t, 30*time.Second)
			time.Sleep(time.Second) // a few renewals
			tc.stop()
			defer tc.restart()
			if code := h.p.Wait(3*kubeTTL + 10*time.Second); code != 123 {
				t.Fatalf("exit %d, want 123\n%s", code, h.p.Output())
			}
			if alive(pid) {
				t.Fatal("child alive after leaderrun exited")
			}
			lastRenewal := lastLogTime(t, h.p.Output(), "renewed")
			died := h.stamp(t, "end")
			if limit := lastRenewal.Add(kubeTTL); !died.Before(limit) {
				t.Fatalf("child died at %v, after last renewal + ttl (%v)", died, limit)
			}
			t.Logf("%s: child died %v before the last renewal + ttl", tc.name, lastRenewal.Add(kubeTTL).Sub(died).Round(time.Millisecond))
		})
	}
}

// editLease changes key's Lease as JSON by hand, as kubectl edit would,
// retrying when a renewal came between.
func editLease(t *testing.T, k *testcluster.Kube, key string, edit func(meta, spec map[string]any)) {
	t.Helper()
	for range 10 {
		code, out := k.Do(t, "GET", leasePath(t, key), nil)
		if code != 200 {
			t.Fatalf("get Lease: %d %s", code, out)
		}
		var ls map[string]any
		if err := json.Unmarshal(out, &ls); err != nil {
			t.Fatal(err)
		}
		edit(ls["metadata"].(map[string]any), ls["spec"].(map[string]any))
		body, err := json.Marshal(ls)
		if err != nil {
			t.Fatal(err)
		}
		code, out = k.Do(t, "PUT", leasePath(t, key), body)
		if code == 200 {
			return
		}
		if code != 409 {
			t.Fatalf("put Lease: %d %s", code, out)
		}
	}
	t.Fatal("the Lease kept changing under the edit")
}

// TestKubernetesDeclarationEdited edits the TTL a running leader's Lease
// declares (DESIGN §1.12). With a renew interval of 2s and the Lease edited
// down to 1s, a standby counting from what the Lease now says may take over
// between two renewals; the leader must treat the edit as a loss and stop
// its child before that. A Lease whose leaseDurationSeconds is removed is a
// loss too (it used to crash the leader), and status reads such a Lease.
func TestKubernetesDeclarationEdited(t *testing.T) {
	e := testcluster.StartEtcd(t, 1)
	k := testcluster.StartKube(t, e)
	admin := k.Kubeconfig(t, k.Token(testcluster.KubeAdmin), "")
	args := func(key string) []string {
		return []string{"--backend", "kubernetes", "--kubeconfig", admin, "--k8s-namespace", "default", "--key", key,
			"--ttl", "6s", "--renew-interval", "2s", "--kill-grace", "1s", "--safety-margin", "500ms", "--log-level", "debug"}
	}

	t.Run("TTL lowered by hand", func(t *testing.T) {
		t.Parallel()
		key := newKey("ttl-edit")
		a, b := pair(t, args(key))
		aPid := readPID(t, a.file("pid"))
		// Right after a renewal, so that the next one is 2s away.
		n := strings.Count(a.p.Output(), "renewed")
		waitFor(t, 10*time.Second, "a renewal", func() bool { return strings.Count(a.p.Output(), "renewed") > n })
		editLease(t, k, key, func(meta, spec map[string]any) {
			meta["annotations"].(map[string]any)["leaderrun/ttl"] = "1s"
			spec["leaseDurationSeconds"] = 1
		})
		edited := time.Now()
		b.waitStarted(t, 20*time.Second)
		b.noOverlap(t)
		t.Logf("edit -> old child ended %v, -> new child started %v",
			a.stamp(t, "end").Sub(edited).Round(time.Millisecond), b.stamp(t, "start").Sub(edited).Round(time.Millisecond))
		if alive(aPid) {
			t.Fatal("the old leader's child is alive while the standby's child runs")
		}
		if code := a.p.Wait(10 * time.Second); code != 123 {
			t.Fatalf("leader exit %d after its Lease was edited, want 123\n%s", code, a.p.Output())
		}
		if !strings.Contains(a.p.Output(), "changed the Lease's") {
			t.Errorf("the leader does not say its Lease was changed:\n%s", a.p.Output())
		}
		b.p.Signal(syscall.SIGTERM)
		b.p.Wait(10 * time.Second)
	})

	t.Run("leaseDurationSeconds removed by hand", func(t *testing.T) {
		t.Parallel()
		key := newKey("lds-removed")
		a := startHost(t, t.TempDir(), "a", "b", args(key))
		pid := a.waitStarted(t, 30*time.Second)
		editLease(t, k, key, func(_, spec map[string]any) { delete(spec, "leaseDurationSeconds") })
		if code := a.p.Wait(10 * time.Second); code != 123 || strings.Contains(a.p.Output(), "panic") {
			t.Fatalf("leader exit %d after leaseDurationSeconds was removed, want 123 and no panic\n%s", code, a.p.Output())
		}
		if alive(pid) {
			t.Fatal("child alive after leaderrun exited")
		}
	})

	t.Run("status of a Lease without leaseDurationSeconds", func(t *testing.T) {
		t.Parallel()
		key := newKey("lds-status")
		name, err := kubernetes.LeaseName("leaderrun", key)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := json.Marshal(map[string]any{
			"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
			"metadata": map[string]any{"name": name, "annotations": map[string]string{
				"leaderrun/contract": "observer-clock/1", "leaderrun/ttl": "6s", "leaderrun/term": "x", "leaderrun/epoch": "7"}},
			"spec": map[string]any{"holderIdentity": "elsewhere"},
		})
		if code, out := k.Do(t, "POST", "/apis/coordination.k8s.io/v1/namespaces/default/leases", body); code != 201 {
			t.Fatalf("create Lease: %d %s", code, out)
		}
		for _, cmd := range [][]string{{"status"}, {"check", "--epoch", "7"}} {
			c := exec.Command(binary, append(cmd, "--backend", "kubernetes", "--kubeconfig", admin, "--k8s-namespace", "default", "--key", key)...)
			out, err := c.CombinedOutput()
			if err != nil || strings.Contains(string(out), "panic") {
				t.Fatalf("%s: %v\n%s", cmd[0], err, out)
			}
			if cmd[0] == "status" && !strings.Contains(string(out), "elsewhere") {
				t.Fatalf("status does not name the holder:\n%s", out)
			}
		}
	})
}
