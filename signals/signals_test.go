package signals

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	good := map[string]syscall.Signal{
		"TERM":    syscall.SIGTERM,
		"SIGTERM": syscall.SIGTERM,
		"sigint":  syscall.SIGINT,
		"hup":     syscall.SIGHUP,
		"9":       syscall.SIGKILL,
		"USR1":    syscall.SIGUSR1,
	}
	for in, want := range good {
		if got, err := Parse(in); err != nil || got != want {
			t.Errorf("Parse(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "65", "NOPE", "SIG"} {
		if got, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) = %v, want an error", in, got)
		}
	}
}

func TestName(t *testing.T) {
	if got := Name(syscall.SIGTERM); got != "SIGTERM" {
		t.Fatalf("Name(SIGTERM) = %q", got)
	}
}

func TestGroupKillsEveryMember(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 1000 & sleep 1000 & wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	if !GroupAlive(pgid) {
		t.Fatal("group not alive after start")
	}
	if err := Group(pgid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	// The background sleeps were reparented to init, which reaps them.
	deadline := time.Now().Add(5 * time.Second)
	for GroupAlive(pgid) {
		if time.Now().After(deadline) {
			t.Fatal("process group still alive 5s after SIGKILL")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := Group(pgid, syscall.SIGKILL); err != nil {
		t.Fatalf("signalling a gone group: %v", err)
	}
}

func TestGroupRefusesSpecialIDs(t *testing.T) {
	for _, id := range []int{-5, 0, 1} {
		if err := Group(id, syscall.SIGTERM); err == nil {
			t.Errorf("Group(%d) did not refuse", id)
		}
	}
}

func TestGroupAliveIgnoresZombies(t *testing.T) {
	// A group whose only member is an unreaped zombie exists but is not alive.
	cmd := exec.Command("sh", "-c", "exit 0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	deadline := time.Now().Add(5 * time.Second)
	for GroupAlive(pgid) {
		if time.Now().After(deadline) {
			t.Fatal("exited process still counted alive")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !GroupExists(pgid) {
		t.Fatal("an unreaped zombie keeps its group in existence")
	}
	_ = cmd.Wait()
	if GroupExists(pgid) {
		t.Fatal("group exists after its only member was reaped")
	}
}
