package bench

import (
	"net"
	"os"
	"testing"
)

// TestConnectedTo: a process is found connected to the address it dialled,
// and to no other.
func TestConnectedTo(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
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
