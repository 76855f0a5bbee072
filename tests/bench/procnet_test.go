package bench

import (
	"net"
	"os"
	"testing"

	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// TestConnectedTo: a process is found connected to the address it dialled,
// and to no other.
func TestConnectedTo(t *testing.T) {
	ln := testsupport.Listen(t)
	other := testsupport.Listen(t)
	if ok, err := connectedTo(os.Getpid(), []string{ln.Addr().String()}); err != nil || ok {
		t.Fatalf("before dialling: connected %v, error %v", ok, err)
	}
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if ok, err := connectedTo(os.Getpid(), []string{ln.Addr().String()}); err != nil || !ok {
		t.Errorf("after dialling %s: connected %v, error %v", ln.Addr(), ok, err)
	}
	if ok, err := connectedTo(os.Getpid(), []string{other.Addr().String()}); err != nil || ok {
		t.Errorf("connected to %s, never dialled: %v, error %v", other.Addr(), ok, err)
	}
}
