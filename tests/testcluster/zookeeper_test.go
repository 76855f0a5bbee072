package testcluster

import (
	"testing"
	"time"
)

func TestZooKeeperStandalone(t *testing.T) {
	z := StartZooKeeper(t, ZooKeeperOptions{Servers: 1})
	if mode, err := z.Mode(0); err != nil || mode != "standalone" {
		t.Fatalf("Mode(0) = %q, %v; want standalone", mode, err)
	}
	z.Kill(0)
	if _, err := z.Mode(0); err == nil {
		t.Fatal("a killed server still answers")
	}
	z.Restart(0)
	z.WaitServing(t)
}

// An isolated follower keeps its clients' connections but, after SyncLimit
// ticks of silence from the leader, stops serving; healed, it rejoins.
func TestZooKeeperIsolateFollower(t *testing.T) {
	z := StartZooKeeper(t, ZooKeeperOptions{Servers: 3})
	leader := z.Leader(t)
	follower := (leader + 1) % 3
	if mode, err := z.Mode(follower); err != nil || mode != "follower" {
		t.Fatalf("Mode(%d) = %q, %v; want follower", follower, mode, err)
	}
	z.Isolate(follower)
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := z.Mode(follower); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("an isolated follower still serves after 60s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := z.Leader(t); got != leader {
		t.Fatalf("leader moved from %d to %d although it kept a quorum", leader, got)
	}
	z.Heal(follower)
	z.WaitServing(t)
}
