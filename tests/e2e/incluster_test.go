package e2e

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker/kubernetes"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// saDir is where a pod's service-account mount lives (/var/run is a link
// to /run).
const saDir = "/run/secrets/kubernetes.io/serviceaccount"

// TestKubernetesInCluster runs leaderrun as in a pod: no kubeconfig, no
// namespace flag, only KUBERNETES_SERVICE_HOST/PORT and a service-account
// mount (token of packaging/kubernetes/rbac.yaml's account, the server's CA,
// a namespace file) on a tmpfs in a private mount namespace. The Lease lands
// in the mount's namespace, and a token rotated the way the kubelet does it
// keeps the leader leading after the old token is revoked; after kill -9,
// the small guard releases the Lease with the rotated token.
func TestKubernetesInCluster(t *testing.T) {
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatalf("unshare (util-linux) is needed: %v", err)
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("the in-cluster test mounts a tmpfs in a private mount namespace and must run as root")
		}
		t.Skip("needs root for a private mount namespace")
	}
	e := testcluster.StartEtcd(t, 1)
	k := testcluster.StartKube(t, e)
	const ns = "jobs-incluster"
	inClusterSetup(t, k, ns)
	first := k.ServiceAccountToken(t, ns, "leaderrun", "first")

	// The mount's content, copied into the namespace's tmpfs by the wrapper.
	src := t.TempDir()
	ca, err := os.ReadFile(k.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"token": []byte(first), "ca.crt": ca, "namespace": []byte(ns)} {
		if err := os.WriteFile(filepath.Join(src, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	u, err := url.Parse(k.URL())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	home := t.TempDir() // empty: no ~/.kube/config
	key := newKey("incluster")
	child := fmt.Sprintf(`echo $$ > %[1]s/pid; echo "$LEADER_EPOCH" > %[1]s/epoch; env > %[1]s/env; echo x >> %[1]s/starts; exec sleep 600`, dir)
	script := `mount -t tmpfs -o mode=0755 tmpfs /run && mkdir -p ` + saDir + ` && cp "$0"/token "$0"/ca.crt "$0"/namespace ` + saDir + `/ && exec "$@"`
	args := []string{"-m", "--propagation", "private", "sh", "-c", script, src, binary,
		"--backend", "kubernetes", "--key", key, "--id", "pod-a",
		"--ttl", "3s", "--renew-interval", "500ms", "--kill-grace", "1s", "--safety-margin", "500ms", "--log-level", "debug",
		"--", "sh", "-c", child}
	// A clean environment: nothing of the test process's (KUBECONFIG,
	// HOME, LEADERRUN_*) reaches leaderrun.
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home,
		"KUBERNETES_SERVICE_HOST=" + u.Hostname(), "KUBERNETES_SERVICE_PORT=" + u.Port()}
	p := startEnv(t, "pod-a", env, "unshare", args...)

	waitFor(t, 30*time.Second, "the child to start with the in-cluster configuration", func() bool {
		// Not just there: the shell creates the file before it writes it.
		b, err := os.ReadFile(filepath.Join(dir, "epoch"))
		return err == nil && strings.HasSuffix(string(b), "\n") || p.Exited()
	})
	if p.Exited() {
		t.Fatalf("leaderrun exited %d before its child started (in-cluster configuration not usable?)\n%s", p.code, p.Output())
	}
	epoch := readFile(t, filepath.Join(dir, "epoch"))
	if epoch == "" || epoch == "0" {
		t.Fatalf("child's LEADER_EPOCH %q", epoch)
	}
	name, err := kubernetes.LeaseName("leaderrun", key)
	if err != nil {
		t.Fatal(err)
	}
	leasePath := "/apis/coordination.k8s.io/v1/namespaces/" + ns + "/leases/" + name
	holder, renewed := readLease(t, k, leasePath)
	if holder == "" {
		t.Fatalf("Lease %s in namespace %s has no holder", name, ns)
	}
	if code, _ := k.Do(t, "GET", "/apis/coordination.k8s.io/v1/namespaces/default/leases/"+name, nil); code != 404 {
		t.Fatalf("a Lease in namespace default too (%d); the namespace file was not used", code)
	}

	// Rotation as the kubelet does it: a new token written beside the old
	// and renamed over it, then the old token revoked (its Secret deleted).
	second := k.ServiceAccountToken(t, ns, "leaderrun", "second")
	mount := fmt.Sprintf("/proc/%d/root%s", p.Pid(), saDir)
	tmp := filepath.Join(mount, ".token.tmp")
	if err := os.WriteFile(tmp, []byte(second), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(mount, "token")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(saDir, "token")); err == nil {
		t.Fatalf("%s/token exists on the host: the mount was not private", saDir)
	}
	if code, out := k.Do(t, "DELETE", "/api/v1/namespaces/"+ns+"/secrets/first", nil); code != 200 {
		t.Fatalf("delete secret: %d %s", code, out)
	}
	waitFor(t, 30*time.Second, "the first token to be refused", func() bool {
		code, _ := k.DoAs(t, first, "GET", leasePath, nil)
		return code == 401
	})
	revoked := time.Now()

	// Several TTLs later: the same leadership, the child never restarted,
	// and the Lease still renewed.
	time.Sleep(4 * kubeTTL)
	if p.Exited() {
		t.Fatalf("leaderrun exited %d after the token was rotated\n%s", p.code, p.Output())
	}
	if got := readFile(t, filepath.Join(dir, "epoch")); got != epoch {
		t.Fatalf("epoch %s after rotation, was %s", got, epoch)
	}
	if starts := readFile(t, filepath.Join(dir, "starts")); starts != "x" {
		t.Fatalf("child started %d times", strings.Count(starts, "x"))
	}
	holder2, renewed2 := readLease(t, k, leasePath)
	if holder2 != holder || !renewed2.After(revoked) {
		t.Fatalf("Lease holder %q renewed %v; want %q renewed after the old token was revoked at %v (%v)",
			holder2, renewed2, holder, revoked, renewed)
	}

	// The token appears neither in leaderrun's output nor in the child's
	// environment.
	childEnv := readFile(t, filepath.Join(dir, "env"))
	for _, tok := range []string{first, second} {
		if strings.Contains(p.Output(), tok) {
			t.Fatal("a service-account token appears in leaderrun's output")
		}
		if strings.Contains(childEnv, tok) {
			t.Fatal("a service-account token appears in the child's environment")
		}
	}

	// kill -9 of leaderrun: its guard, the small leaderrun-guard, kills the
	// child and clears the Lease itself, as the account of rbac.yaml (get
	// and update), with the rotated token it reads from the mount then.
	wantSmallGuard(t, p)
	pid := readPID(t, filepath.Join(dir, "pid"))
	p.Signal(syscall.SIGKILL)
	killed := time.Now()
	waitFor(t, kubeTTL, "the guard to clear the Lease's holder", func() bool {
		h, _ := readLease(t, k, leasePath)
		return h == ""
	})
	t.Logf("kill -9 of leaderrun -> Lease released by its guard: %v", time.Since(killed).Round(time.Millisecond))
	if alive(pid) {
		t.Fatal("the child outlived the release of its Lease")
	}
	p.Wait(10 * time.Second)
	if strings.Contains(p.Output(), second) {
		t.Fatal("the service-account token appears in the output of leaderrun or its guard")
	}
}

// startEnv is start for another program (a wrapper that execs leaderrun)
// with exactly the environment env.
func startEnv(t *testing.T, name string, env []string, prog string, args ...string) *Proc {
	t.Helper()
	cmd := exec.Command(prog, args...)
	cmd.Env = env
	return launch(t, name, cmd)
}

// inClusterSetup makes namespace ns with packaging/kubernetes/rbac.yaml
// applied and two Secrets, first and second, to bind tokens to.
func inClusterSetup(t *testing.T, k *testcluster.Kube, ns string) {
	t.Helper()
	manifest, err := os.ReadFile("../../packaging/kubernetes/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	k.CreateNamespace(t, ns)
	k.Apply(t, ns, manifest)
	for _, s := range []string{"first", "second"} {
		k.CreateSecret(t, ns, s)
	}
}

// readLease returns the holder and renew time of the Lease at path.
func readLease(t *testing.T, k *testcluster.Kube, path string) (string, time.Time) {
	t.Helper()
	code, out := k.Do(t, "GET", path, nil)
	var l struct {
		Spec struct {
			HolderIdentity string
			RenewTime      time.Time
		}
	}
	if code != 200 || json.Unmarshal(out, &l) != nil {
		t.Fatalf("get Lease %s: %d %s", path, code, out)
	}
	return l.Spec.HolderIdentity, l.Spec.RenewTime
}

// readFile is a file's content without surrounding space.
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
