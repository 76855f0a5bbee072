//go:build linux

package contain

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// The key is made once, private, and read back the same; a directory or a
// file another user could have put there is refused.
func TestSealKeyFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	k1, err := loadSealKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := loadSealKey(dir)
	if err != nil || !bytes.Equal(k1, k2) || len(k1) != sealLen {
		t.Fatalf("the key read again: %x, %v; want %x", k2, err, k1)
	}
	st, err := os.Lstat(filepath.Join(dir, sealName))
	if err != nil || st.Mode().Perm() != 0o600 || !st.Mode().IsRegular() {
		t.Fatalf("the key's file: %v, %v; want a regular file of mode 0600", st.Mode(), err)
	}
	if d, _ := os.Lstat(dir); d.Mode().Perm() != 0o700 {
		t.Errorf("the key's directory has mode %v, want 0700", d.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("left in the directory: %v, want only %s", entries, sealName)
	}

	// Readable by others: refused.
	if err := os.Chmod(filepath.Join(dir, sealName), 0o644); err != nil {
		t.Fatal(err)
	}
	if k, err := loadSealKey(dir); err == nil {
		t.Errorf("a key readable by others was used: %x", k)
	}
	// A link: refused, never followed.
	link := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(link, 0o700); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(t.TempDir(), "target")
	if err := os.WriteFile(target, make([]byte, sealLen), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(link, sealName)); err != nil {
		t.Fatal(err)
	}
	if k, err := loadSealKey(link); err == nil {
		t.Errorf("a key through a symlink was used: %x", k)
	}
	// A directory others may write in: refused.
	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(open, 0o777)
	if k, err := loadSealKey(open); err == nil {
		t.Errorf("a key in a directory others may write in was used: %x", k)
	}
}

// A sealed token is read as the token it seals; the seal holds only for
// that token under this user's key.
func TestSealedToken(t *testing.T) {
	if sealKey() == nil {
		t.Skipf("no marker key for this user in %s", sealDir())
	}
	b := &Box{opts: Options{Key: "k"}}
	j, err := b.NewJob()
	if err != nil {
		t.Fatal(err)
	}
	c, err := b.NewCheck()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Remove()
	for _, tok := range []string{j.Token(), c.Token()} {
		base, s := unseal(tok)
		if s == "" || strings.Contains(base, "-") || !sealGood(base, s) {
			t.Fatalf("token %q: unsealed %q, seal %q, good %v", tok, base, s, sealGood(base, s))
		}
		o1, ok1 := parseToken(tok)
		o2, ok2 := parseToken(base)
		if !ok1 || !ok2 || o1 != o2 {
			t.Errorf("token %q read as %+v, %v; without its seal %+v, %v", tok, o1, ok1, o2, ok2)
		}
		// The same seal on a token naming another leaderrun: bad.
		f := strings.SplitN(base, ".", 2)
		if other := "1." + f[1]; sealGood(other, s) {
			t.Errorf("seal %q holds for %q too", s, other)
		}
	}
	if !IsCheckToken(c.Token()) || IsCheckToken(j.Token()) {
		t.Errorf("IsCheckToken: check %v, job %v", IsCheckToken(c.Token()), IsCheckToken(j.Token()))
	}
}

// Another user's process with a marker of the key naming a dead leaderrun
// is a leftover only if its seal is good: unsealed or forged, it is
// neither killed nor counted, and a sealed one is, whatever its user (a
// job that switched user in place).
func TestSweepJudgesOtherUsersMarkersBySeal(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run a process as another user")
	}
	if sealKey() == nil {
		t.Skipf("no marker key for root in %s", sealDir())
	}
	const key = "local\x00leaderrun\x00sealed"
	base := fmt.Sprintf("%d.1.1.%d.%s.%s", os.Getpid(), StartTime(os.Getpid())+1, pidNamespace(), keyHash(key))
	f := strings.SplitN(base, ".", 3)
	asNobody := func(marker string) *exec.Cmd {
		cmd := exec.Command("/bin/sleep", "60")
		cmd.Env = []string{EnvMarker + "=" + marker}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: testsupport.Nobody, Gid: testsupport.Nobody}}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go cmd.Wait()
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		return cmd
	}
	unsealed := asNobody(base)
	forged := asNobody(f[0] + "." + f[1] + "-" + strings.Repeat("ab", sealHex/2) + "." + f[2])
	good := asNobody(sealed(base))
	testsupport.WaitFor(t, 5*time.Second, "the processes to run", func() bool {
		for _, c := range []*exec.Cmd{unsealed, forged, good} {
			if len(markers(c.Process.Pid)) == 0 {
				return false
			}
		}
		return true
	})

	b, err := Open(Group, Options{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	found, err := b.Sweep(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || len(found[0].Pids) != 1 || found[0].Pids[0] != good.Process.Pid || found[0].Token != base {
		t.Errorf("found %+v, want the sealed one alone, %d, as %s", found, good.Process.Pid, base)
	}
	if ProcessAlive(good.Process.Pid) {
		t.Errorf("nobody's process with a good seal still runs")
	}
	for _, c := range []*exec.Cmd{unsealed, forged} {
		if !ProcessAlive(c.Process.Pid) {
			t.Errorf("nobody's process %d with marker %v was killed", c.Process.Pid, markers(c.Process.Pid))
		}
	}
}

// A health check removed raises the checks' mark of its key, never the
// jobs' (a standby's check ends beside the leader's running job, which
// would then be missed were it left over), and so does one not seen gone
// (another user's copy of its marker, kept respawning, would keep it from
// ever being seen gone).
func TestCheckRemovedEndsChecksOnly(t *testing.T) {
	if sealKey() == nil {
		t.Skipf("no marker key for this user in %s", sealDir())
	}
	key := fmt.Sprintf("checks-ended-%d-%d", os.Getpid(), time.Now().UnixNano())
	kh := keyHash(key)
	t.Cleanup(func() {
		for _, check := range []bool{false, true} {
			_ = os.Remove(filepath.Join(sealDir(), endedName(kh, check)))
		}
	})
	b := &Box{opts: Options{Key: key}}
	mono := func(tok string) int64 {
		base, _ := unseal(tok)
		return jobMono(base)
	}
	c, err := b.NewCheck()
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Remove()
	if j, k := endedUpTo(kh, false), endedUpTo(kh, true); j != 0 || k != mono(c.Token()) || k == 0 {
		t.Fatalf("a check removed: jobs' mark %d, checks' %d; want 0, %d", j, k, mono(c.Token()))
	}
	j, err := b.NewJob()
	if err != nil {
		t.Fatal(err)
	}
	_ = j.Remove()
	if got, k := endedUpTo(kh, false), endedUpTo(kh, true); got != mono(j.Token()) || got == 0 || k != mono(c.Token()) {
		t.Fatalf("a job removed: jobs' mark %d, checks' %d; want %d, %d", got, k, mono(j.Token()), mono(c.Token()))
	}
}
