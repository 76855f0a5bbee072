package testcluster

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestKube starts kube-apiserver on a test etcd, checks that RBAC and the
// static tokens work as StartKube promises, and that Stop and Restart keep
// the data and the credentials.
func TestKube(t *testing.T) {
	e := StartEtcd(t, 1)
	began := time.Now()
	k := StartKube(t, e, KubeUser{Name: "someone", Groups: []string{"testers"}})
	t.Logf("kube-apiserver ready after %v, RSS %s", time.Since(began).Round(100*time.Millisecond), rss(k.proc.cmd.Process.Pid))

	const path = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
	lease := []byte(`{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"probe"}}`)
	if code, out := k.Do(t, "POST", path, lease); code != 201 {
		t.Fatalf("admin create Lease: %d %s", code, out)
	}
	if code, _ := k.DoAs(t, k.Token("someone"), "GET", path+"/probe", nil); code != 403 {
		t.Fatalf("a user without a role read a Lease: %d, want 403 (RBAC on)", code)
	}
	if code, _ := k.DoAs(t, "wrong", "GET", path+"/probe", nil); code != 401 {
		t.Fatalf("an unknown token got %d, want 401", code)
	}
	if code, out := k.Do(t, "GET", path+"/probe", nil); code != 200 {
		t.Fatalf("admin read Lease: %d %s", code, out)
	}
	// The create, the refused read and the admin's read; the unknown token
	// never named a user, and no other Lease counts.
	if code, out := k.Do(t, "POST", path, []byte(`{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"other"}}`)); code != 201 {
		t.Fatalf("admin create Lease: %d %s", code, out)
	}
	if n, err := k.LeaseRequests("default", "probe"); err != nil || n != 3 {
		t.Errorf("LeaseRequests(probe) = %d, %v; want 3", n, err)
	}
	k.Stop()
	if _, _, err := k.do("GET", "/readyz", k.Token(KubeAdmin), nil); err == nil {
		t.Fatal("the server still answers after Stop")
	}
	k.Restart()
	if code, out := k.Do(t, "GET", path+"/probe", nil); code != 200 {
		t.Fatalf("Lease after restart: %d %s", code, out)
	}
}

// rss reads a process's resident set size, for the log.
func rss(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			return strings.TrimSpace(strings.TrimPrefix(line, "VmRSS:"))
		}
	}
	return "?"
}
