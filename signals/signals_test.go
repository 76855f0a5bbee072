package signals

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	cases := []struct {
		in   string
		want syscall.Signal
		bad  bool
	}{
		{in: "TERM", want: syscall.SIGTERM},
		{in: "SIGTERM", want: syscall.SIGTERM},
		{in: "sigint", want: syscall.SIGINT},
		{in: "hup", want: syscall.SIGHUP},
		{in: "9", want: syscall.SIGKILL},
		{in: "USR1", want: syscall.SIGUSR1},
		{in: "", bad: true},
		{in: "0", bad: true},
		{in: "65", bad: true},
		{in: "NOPE", bad: true},
		{in: "SIG", bad: true},
	}
	for _, c := range cases {
		got, err := Parse(c.in)
		if c.bad {
			if err == nil {
				t.Errorf("Parse(%q) = %v, want an error", c.in, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("Parse(%q) = %v, %v; want %v", c.in, got, err, c.want)
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
