package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testcluster"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// etcdAuthArgs are the etcd tests' options with a TTL long enough that a
// failover through the guard's release cannot be mistaken for one at the
// lease's expiry.
func etcdAuthArgs(endpoints []string, key string, extra ...string) []string {
	args := []string{"--backend", "etcd", "--etcd-endpoints", strings.Join(endpoints, ","), "--key", key,
		"--ttl", "40s", "--renew-interval", "2s", "--kill-grace", "1s", "--safety-margin", "1s"}
	return append(args, extra...)
}

// wantNoSecret fails if secret shows in what any of procs printed (their
// guards' lines included: a guard writes on leaderrun's stderr).
func wantNoSecret(t *testing.T, secret string, procs ...*Proc) {
	t.Helper()
	for _, p := range procs {
		if strings.Contains(p.Output(), secret) {
			t.Errorf("leaderrun %s printed the secret:\n%s", p.name, p.Output())
		}
	}
}

// The credentials of an etcd user, given as etcdctl takes them
// (--etcd-user USER:PASSWORD) or in a file (--etcd-password-file), reach
// leaderrun and its guard apart: the guard logs in and revokes the lease
// of a leaderrun killed with -9, so the standby leads long before the
// TTL, and the password shows in no line of either. Given as USER:PASSWORD
// it used to go whole as the user name: the guard's login failed, its
// error line printed it, and the standby waited the whole TTL.
func TestEtcdCredentialsReachTheGuard(t *testing.T) {
	c := testcluster.StartEtcd(t, 1)
	eps := c.Endpoints()
	const password = "S3cretPWzz"
	c.EnableAuth(t, "r00tPWzz", testcluster.EtcdUser{Name: "app", Password: password, Prefix: "/leaderrun/"})

	t.Run("USER:PASSWORD", func(t *testing.T) {
		t.Parallel()
		a, b := failoverAfterKill9Guarded(t, etcdAuthArgs(eps, newKey("userpw"), "--etcd-user", "app:"+password), 15*time.Second, true)
		stopHost(t, b)
		wantNoSecret(t, password, a.p, b.p)
	})
	t.Run("password file", func(t *testing.T) {
		t.Parallel()
		file := testsupport.WriteFile(t, filepath.Join(t.TempDir(), "etcd-password"), password+"\n", 0o600)
		a, b := failoverAfterKill9Guarded(t, etcdAuthArgs(eps, newKey("pwfile"), "--etcd-user", "app", "--etcd-password-file", file), 15*time.Second, true)
		stopHost(t, b)
		wantNoSecret(t, password, a.p, b.p)
		if strings.Contains(a.p.Output(), "readable by others") {
			t.Errorf("a file of mode 0600 was said to be readable by others:\n%s", a.p.Output())
		}
	})
	t.Run("password file from the environment, readable by all", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		file := testsupport.WriteFile(t, filepath.Join(dir, "etcd-password"), password+"\n", 0o644)
		p := start(t, "env file", []string{"LEADERRUN_ETCD_PASSWORD_FILE=" + file},
			append(etcdAuthArgs(eps, newKey("pwenv"), "--etcd-user", "app"), "--", "sh", "-c", "env > "+dir+"/env")...)
		if code := p.Wait(30 * time.Second); code != 0 {
			t.Fatalf("exit %d, want the child's 0\n%s", code, p.Output())
		}
		if !strings.Contains(p.Output(), "readable by others") || !strings.Contains(p.Output(), "0644") {
			t.Errorf("no warning about a password file every user may read:\n%s", p.Output())
		}
		env, _ := os.ReadFile(dir + "/env")
		if strings.Contains(string(env), password) {
			t.Error("the password reached the child's environment")
		}
		wantNoSecret(t, password, p)
	})
	t.Run("a password file that cannot be read", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		for name, file := range map[string]string{
			"missing": filepath.Join(dir, "none"),
			"empty":   testsupport.WriteFile(t, filepath.Join(dir, "empty"), "\n", 0o600),
			"a dir":   dir,
		} {
			p := start(t, name, nil, append(etcdAuthArgs(eps, newKey("pwbad"), "--etcd-user", "app",
				"--etcd-password-file", file), "--", "touch", dir+"/ran")...)
			if code := p.Wait(20 * time.Second); code != 125 {
				t.Errorf("%s: exit %d, want 125\n%s", name, code, p.Output())
			}
			out := strings.TrimSpace(p.Output())
			if strings.Count(out, "\n") > 0 || !strings.Contains(out, "--etcd-password-file") {
				t.Errorf("%s: want one line naming --etcd-password-file, got:\n%s", name, out)
			}
		}
		if _, err := os.Stat(dir + "/ran"); err == nil {
			t.Error("the command ran")
		}
	})
}

// --zk-auth-file gives the digest credentials without showing them: the
// znodes become the user's, a run with other credentials in its file is
// refused, and neither the child's environment nor the output shows them.
func TestZooKeeperAuthFile(t *testing.T) {
	z := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 1})
	servers := z.Addrs()
	key := newKey("authfile")
	dir := t.TempDir()
	right := testsupport.WriteFile(t, filepath.Join(dir, "right"), "alice:Zk5ecretPW\n", 0o600)
	ok := start(t, "right", nil, append(zkArgs(servers, key, "--zk-auth-file", right),
		"--", "sh", "-c", "env > "+dir+"/env")...)
	if code := ok.Wait(20 * time.Second); code != 0 {
		t.Fatalf("exit %d with the right credentials\n%s", code, ok.Output())
	}
	env, _ := os.ReadFile(dir + "/env")
	if strings.Contains(string(env), "Zk5ecretPW") {
		t.Error("the credentials reached the child's environment")
	}
	wantNoSecret(t, "Zk5ecretPW", ok)

	// The key's znode is alice's only: the file's credentials were used.
	wrong := testsupport.WriteFile(t, filepath.Join(dir, "wrong"), "alice:wrong-secret\n", 0o600)
	p := start(t, "wrong", nil, append(zkArgs(servers, key, "--zk-auth-file", wrong, "--acquire-timeout", "10s"), "--", "true")...)
	if code := p.Wait(20 * time.Second); code != 125 {
		t.Fatalf("exit %d with the wrong credentials, want 125\n%s", code, p.Output())
	}
	wantNoSecret(t, "wrong-secret", p)

	// kill -9: the guard, which is no longer told the credentials, closes
	// the session of the znodes alice owns, and the standby leads at once.
	a, b := failoverAfterKill9Guarded(t, zkArgs(servers, newKey("authkill9"), "--zk-auth-file", right), time.Second, true)
	stopHost(t, b)
	wantNoSecret(t, "Zk5ecretPW", a.p, b.p)

	bad := testsupport.WriteFile(t, filepath.Join(dir, "bad"), "no-colon\n", 0o600)
	for name, file := range map[string]string{"missing": filepath.Join(dir, "none"), "not USER:PASSWORD": bad} {
		p := start(t, name, nil, append(zkArgs(servers, newKey("authbad"), "--zk-auth-file", file), "--", "true")...)
		if code := p.Wait(20 * time.Second); code != 125 {
			t.Errorf("%s: exit %d, want 125\n%s", name, code, p.Output())
		}
		if out := strings.TrimSpace(p.Output()); strings.Contains(out, "\n") || !strings.Contains(out, "--zk-auth-file") {
			t.Errorf("%s: want one line naming --zk-auth-file, got:\n%s", name, out)
		}
	}
}

// The job sees the DSN without any secret in it: sslpassword (the client
// key's passphrase) used to go through, only password was taken out.
func TestPostgresDSNSecretsStayOut(t *testing.T) {
	pg := testcluster.StartPostgres(t)
	for name, dsn := range map[string]string{
		"URL":     pg.DSN() + "&sslpassword=K3yPassphr4se",
		"keyword": "host=127.0.0.1 port=" + strconv.Itoa(pg.Port()) + " user=postgres dbname=postgres sslmode=disable sslpassword='K3yPassphr4se'",
	} {
		dir := t.TempDir()
		p := start(t, name, nil, append(pgArgs(dsn, newKey("dsn")), "--", "sh", "-c", "env > "+dir+"/env")...)
		if code := p.Wait(30 * time.Second); code != 0 {
			t.Fatalf("%s: exit %d, want the child's 0\n%s", name, code, p.Output())
		}
		env, _ := os.ReadFile(dir + "/env")
		if !strings.Contains(string(env), "LEADERRUN_PG_DSN=") {
			t.Errorf("%s: the child got no LEADERRUN_PG_DSN", name)
		}
		if strings.Contains(string(env), "K3yPassphr4se") {
			t.Errorf("%s: the client key's passphrase reached the child's environment", name)
		}
		wantNoSecret(t, "K3yPassphr4se", p)
	}
}
