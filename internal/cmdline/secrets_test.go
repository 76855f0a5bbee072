//go:build linux

package cmdline

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/etcd/etcdwire"
	"github.com/leaderrun/leaderrun/locker/zookeeper/zkwire"
)

// --id is bounded and one line: an --id of 66,000 bytes made a guard hello
// larger than its pipe (and the guard was killed and started again in a
// loop); a control character would split log lines and status records.
func TestIDRule(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	local := []string{"--backend", "local", "--lock-dir", dir, "--key", "k"}
	for _, c := range []struct{ id, line string }{
		{strings.Repeat("x", 66000), "--id must be at most 253 bytes, got 66000"},
		{"web\n1", `--id must not contain control characters, got '\n'`},
		{"web\x1b[2J", `--id must not contain control characters, got '\x1b'`},
		{"web\xff", "--id must be UTF-8 text"},
	} {
		code, _, errOut := leaderrun(t, nil, append(local, "--id", c.id, "--", "touch", dir+"/ran")...)
		if code != 125 || errOut != "leaderrun: "+c.line+"\n" {
			t.Errorf("--id %.20q: exit %d, stderr %q; want 125 and %q", c.id, code, errOut, c.line)
		}
	}
	if _, err := os.Stat(dir + "/ran"); err == nil {
		t.Error("the command ran with a refused --id")
	}
	id := strings.Repeat("é", 126) + "x" // 253 bytes
	if code, _, errOut := leaderrun(t, nil, append(local, "--id", id, "--", "true")...); code != 0 {
		t.Errorf("--id of 253 bytes: exit %d\n%s", code, errOut)
	}
}

// The guard's hello carries a password given in a file as the file's name,
// a password given as USER:PASSWORD apart from the user, and ZooKeeper
// digest credentials given in a file as the file's name.
func TestGuardHelloSecrets(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "pw")
	if err := os.WriteFile(file, []byte("fromFile\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hello := func(s backendSettings) string {
		h, _ := s.Guard(nil)
		b, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	s := &etcdSettings{}
	if err := s.readCredentials("app:Split", "", ""); err != nil {
		t.Fatal(err)
	}
	var h etcdwire.Hello
	_ = json.Unmarshal([]byte(hello(s)), &h)
	if h.User != "app" || h.Password != "Split" {
		t.Errorf("USER:PASSWORD gave user %q, password %q; want them apart", h.User, h.Password)
	}

	s = &etcdSettings{}
	if err := s.readCredentials("app", "fromFlag", file); err != nil {
		t.Fatal(err)
	}
	if s.Password != "fromFile" {
		t.Errorf("leaderrun's own password %q, want the file's (less its newline), which wins over the flag", s.Password)
	}
	if got := hello(s); strings.Contains(got, "fromFile") || strings.Contains(got, "fromFlag") || !strings.Contains(got, file) {
		t.Errorf("hello %s: want the file's name and no password", got)
	}
	again := &etcdSettings{}
	_ = json.Unmarshal([]byte(hello(s)), &again.Hello)
	lk, err := again.New(locker.Options{Key: "k", Prefix: "leaderrun", ID: "a", TTL: 5 * time.Second}, true, newQuietLogger())
	if err != nil {
		t.Fatal(err)
	}
	_ = lk.Close()
	if again.Password != "fromFile" {
		t.Errorf("leaderrun as the guard read password %q from the hello's file, want the file's", again.Password)
	}

	z := &zookeeperSettings{Hello: zkwire.Hello{Servers: []string{"127.0.0.1:2181"}, Auth: "alice:Zk5ecret"}, authFile: file}
	if got := hello(z); strings.Contains(got, "Zk5ecret") || !strings.Contains(got, file) {
		t.Errorf("the guard's ZooKeeper hello %s: want the auth file's name and no digest credentials", got)
	}
}
