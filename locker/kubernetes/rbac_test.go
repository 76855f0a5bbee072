package kubernetes

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// tokenFileKubeconfig writes a kubeconfig whose user reads its token from a
// file, as the in-cluster configuration does, and returns both paths.
func tokenFileKubeconfig(t *testing.T, k *testcluster.Kube, token string) (kubeconfig, tokenFile string) {
	t.Helper()
	dir := t.TempDir()
	tokenFile = filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: %s\n    certificate-authority: %s\nusers:\n- name: u\n  user:\n    tokenFile: %s\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n",
		k.URL(), k.CAFile(), tokenFile)
	kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return kubeconfig, tokenFile
}

// TestRBAC proves packaging/kubernetes/rbac.yaml sufficient, and checks
// how refusals and credential changes are reported.
func TestRBAC(t *testing.T) {
	srv := startServer(t, testcluster.KubeUser{Name: "nobody", Groups: []string{"leaderrun-test"}})
	manifest, err := os.ReadFile("../../packaging/kubernetes/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const ns = "jobs"
	srv.kube.CreateNamespace(t, ns)
	srv.kube.Apply(t, ns, manifest)

	// Two candidates with tokens of the example's service account, bound to
	// exactly its Role, go through a whole leadership and a hand-over.
	t.Run("ExampleRoleSuffices", func(t *testing.T) {
		tok := srv.kube.ServiceAccountToken(t, ns, "leaderrun", "")
		cfg := srv.kube.Kubeconfig(t, tok, ns)
		key := lockertest.Key(t)
		useSA := func(c *Config) { c.Kubeconfig, c.Namespace = cfg, "" }
		l := srv.newLocker(t, key, useSA)
		if l.Namespace() != ns {
			t.Fatalf("namespace %q, want the kubeconfig context's %q", l.Namespace(), ns)
		}
		a := mustAcquire(t, l)
		if _, err := l.Leader(lockertest.Ctx(t, 5*time.Second)); err != nil {
			t.Fatalf("Leader: %v", err)
		}
		ch := lockertest.AcquireAsync(t, lockertest.Ctx(t, 30*time.Second), srv.newLocker(t, key, useSA))
		// The standby takes over by observation: an update of a held Lease.
		a.(*lease).stopWatch()
		r := <-ch
		if r.Err != nil {
			t.Fatalf("takeover with the example role: %v", r.Err)
		}
		if _, err := r.Lease.Renew(lockertest.Ctx(t, 5*time.Second)); err != nil {
			t.Fatalf("Renew: %v", err)
		}
		if err := r.Lease.Release(lockertest.Ctx(t, 5*time.Second)); err != nil {
			t.Fatalf("Release: %v", err)
		}
		// The history Lease: created, then updated, then read.
		for _, ended := range []string{"", locker.TermExited} {
			tm := locker.Term{Epoch: r.Lease.Epoch(), ID: "sa", Ended: ended}
			if err := l.RecordTerm(lockertest.Ctx(t, 5*time.Second), tm, 5); err != nil {
				t.Fatalf("RecordTerm: %v", err)
			}
		}
		if terms, err := l.Terms(lockertest.Ctx(t, 5*time.Second), 0); err != nil || len(terms) != 1 || terms[0].Ended != locker.TermExited {
			t.Fatalf("Terms = %+v, %v", terms, err)
		}
		// The control Lease: created, watched, updated, read.
		v, err := l.SetControl(lockertest.Ctx(t, 5*time.Second), locker.Control{})
		if err != nil {
			t.Fatalf("SetControl (create): %v", err)
		}
		done := waitAsync(t, srv.newLocker(t, key, useSA), v)
		time.Sleep(500 * time.Millisecond)
		if v, err = l.SetControl(lockertest.Ctx(t, 5*time.Second), pauseRecord(v)); err != nil {
			t.Fatalf("SetControl (update): %v", err)
		}
		if r := <-done; r.err != nil || r.c.Version != v {
			t.Fatalf("WaitControl = %+v, %v; want version %q", r.c, r.err, v)
		}
		if c, err := l.Control(lockertest.Ctx(t, 5*time.Second)); err != nil || !c.Paused() {
			t.Fatalf("Control = %+v, %v", c, err)
		}
		g := srv.newLocker(t, key, useSA)
		b := mustAcquire(t, g)
		if err := g.ReleaseHandle(lockertest.Ctx(t, 5*time.Second), b.Handle()); err != nil {
			t.Fatalf("ReleaseHandle: %v", err)
		}
	})

	// A token without any role is refused (exit 125), naming the verb and
	// the resource, and the token appears nowhere in the message.
	t.Run("ForbiddenIsRefused", func(t *testing.T) {
		tok := srv.kube.Token("nobody")
		l := srv.newLocker(t, lockertest.Key(t), func(c *Config) { c.Kubeconfig = srv.kube.Kubeconfig(t, tok, "") })
		_, err := l.Acquire(lockertest.Ctx(t, 10*time.Second))
		if !errors.Is(err, locker.ErrRefused) {
			t.Fatalf("Acquire without RBAC = %v, want ErrRefused", err)
		}
		for _, want := range []string{"get", "leases", "RBAC"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name %q", err, want)
			}
		}
		if strings.Contains(err.Error(), tok) {
			t.Fatal("the error contains the token")
		}
	})

	// A rejected token (never valid, or expired) is refused.
	t.Run("BadTokenIsRefused", func(t *testing.T) {
		const bad = "not-a-valid-token-0123456789"
		l := srv.newLocker(t, lockertest.Key(t), func(c *Config) { c.Kubeconfig = srv.kube.Kubeconfig(t, bad, "") })
		_, err := l.Acquire(lockertest.Ctx(t, 10*time.Second))
		if !errors.Is(err, locker.ErrRefused) || strings.Contains(err.Error(), bad) {
			t.Fatalf("Acquire with a bad token = %v, want ErrRefused without the token", err)
		}
	})

	// A token file rotated under a running leader (as the kubelet rotates
	// a pod's token), with the old token revoked, keeps renewals working.
	t.Run("RotatedTokenFile", func(t *testing.T) {
		for _, s := range []string{"first", "second"} {
			srv.kube.CreateSecret(t, ns, s)
		}
		first := srv.kube.ServiceAccountToken(t, ns, "leaderrun", "first")
		cfg, file := tokenFileKubeconfig(t, srv.kube, first)
		l := srv.newLocker(t, lockertest.Key(t), func(c *Config) { c.Kubeconfig, c.Namespace = cfg, ns })
		a := mustAcquire(t, l)
		if err := os.WriteFile(file, []byte(srv.kube.ServiceAccountToken(t, ns, "leaderrun", "second")), 0o600); err != nil {
			t.Fatal(err)
		}
		if code, out := srv.kube.Do(t, "DELETE", "/api/v1/namespaces/"+ns+"/secrets/first", nil); code != 200 {
			t.Fatalf("delete secret: %d %s", code, out)
		}
		// The old token is refused from now on (its Secret is gone).
		testsupport.WaitFor(t, 30*time.Second, "the first token still works", func() bool {
			code, _ := srv.kube.DoAs(t, first, "GET", "/apis/coordination.k8s.io/v1/namespaces/"+ns+"/leases/"+l.name, nil)
			return code == 401
		})
		if _, err := a.Renew(lockertest.Ctx(t, 5*time.Second)); err != nil {
			t.Fatalf("Renew after the token was rotated: %v", err)
		}
	})
}
