package consul

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/leaderrun/leaderrun/locker"
)

func TestSplitAddresses(t *testing.T) {
	tests := []struct {
		in   string
		want []string
		bad  bool
	}{
		{in: "127.0.0.1:8500", want: []string{"127.0.0.1:8500"}},
		{in: "unix:///run/consul.sock", want: []string{"unix:///run/consul.sock"}},
		{in: "https://a:8501, https://b:8501,https://c:8501", want: []string{"https://a:8501", "https://b:8501", "https://c:8501"}},
		{in: "a:8500,", bad: true},
		{in: ",a:8500", bad: true},
		{in: "a:8500,,b:8500", bad: true},
		{in: "unix:///run/consul.sock,a:8500", bad: true},
	}
	for _, tt := range tests {
		got, err := splitAddresses(tt.in)
		if tt.bad != (err != nil) || len(got) != len(tt.want) {
			t.Errorf("splitAddresses(%q) = %q, %v", tt.in, got, err)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("splitAddresses(%q)[%d] = %q, want %q", tt.in, i, got[i], tt.want[i])
			}
		}
	}
}

// A failure moves to the next address only if another server might
// answer, and only once for failures of the same address.
func TestEndpointsMove(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	bg := context.Background()
	tests := []struct {
		name string
		ctx  context.Context
		err  error
		move bool
	}{
		{"transport error", bg, errors.New("dial tcp: connection refused"), true},
		{"timeout", bg, context.DeadlineExceeded, true},
		{"server without Raft leader", bg, api.StatusError{Code: http.StatusInternalServerError, Body: "No cluster leader"}, true},
		{"session not found", bg, api.StatusError{Code: http.StatusNotFound}, false},
		{"ACL denied", bg, api.StatusError{Code: http.StatusForbidden, Body: "Permission denied"}, false},
		{"refused", bg, locker.ErrRefused, true}, // a bare sentinel is not a TLS or ACL refusal
		{"caller gave up", cancelled, context.Canceled, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &endpoints{addrs: []string{"a", "b", "c"}, clients: make([]*api.Client, 3), log: hclog.NewNullLogger(), moved: make(chan struct{})}
			moved := e.movedFrom(0)
			e.failed(tt.ctx, 0, tt.err)
			at, _ := e.pick()
			if got := at == 1; got != tt.move {
				t.Fatalf("after %v: address %d in use, want moved=%v", tt.err, at, tt.move)
			}
			select {
			case <-moved:
				if !tt.move {
					t.Fatal("movedFrom closed without a move")
				}
			default:
				if tt.move {
					t.Fatal("movedFrom not closed after a move")
				}
			}
		})
	}

	// Two reports of the same failed address skip nothing; the list wraps.
	e := &endpoints{addrs: []string{"a", "b"}, clients: make([]*api.Client, 2), log: hclog.NewNullLogger(), moved: make(chan struct{})}
	e.failed(bg, 0, errors.New("reset"))
	e.failed(bg, 0, errors.New("reset"))
	if at, _ := e.pick(); at != 1 {
		t.Fatalf("after two reports of address 0: %d in use, want 1", at)
	}
	e.failed(bg, 1, errors.New("reset"))
	if at, _ := e.pick(); at != 0 {
		t.Fatalf("the list does not wrap: %d in use", at)
	}

	// One address never moves.
	one := &endpoints{addrs: []string{"a"}, clients: make([]*api.Client, 1), log: hclog.NewNullLogger(), moved: make(chan struct{})}
	one.failed(bg, 0, errors.New("reset"))
	if at, _ := one.pick(); at != 0 {
		t.Fatalf("one address moved to %d", at)
	}
}
