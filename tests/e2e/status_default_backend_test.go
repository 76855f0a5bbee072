//go:build linux

package e2e

import (
	"strings"
	"testing"
)

// TestStatusOnTheDefaultBackendSaysSo: `leaderrun status billing` typed
// on a host whose instance runs on etcd reads Consul, the default, and
// fails on its address. The error must say that the default backend was
// read and how to name the right one, not only a Consul URL. Given
// --backend, the error is the backend's alone.
func TestStatusOnTheDefaultBackendSaysSo(t *testing.T) {
	t.Parallel()
	env := []string{"CONSUL_HTTP_ADDR=127.0.0.1:1"}
	code, _, errOut, _ := runOnce(t, env, "status", "billing", "--timeout", "5s")
	if code != 125 {
		t.Fatalf("status: exit %d, want 125\n%s", code, errOut)
	}
	if lines := strings.Split(strings.TrimSpace(errOut), "\n"); len(lines) != 1 {
		t.Errorf("status: want one line, got %d:\n%s", len(lines), errOut)
	}
	for _, want := range []string{"consul, the default", "--backend", "--unit"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("status on the default backend does not say %q:\n%s", want, errOut)
		}
	}
	code, _, errOut, _ = runOnce(t, env, "status", "billing", "--backend", "consul", "--timeout", "5s")
	if code != 125 || strings.Contains(errOut, "the default") {
		t.Errorf("status --backend consul: exit %d, want 125 without a word of the default:\n%s", code, errOut)
	}
}

// TestQueriesOnTheDefaultBackendSaySo: every command that reads or
// writes a key's records says, as status does, that consul was read as
// the default when nothing named a backend, and not when --backend did.
func TestQueriesOnTheDefaultBackendSaySo(t *testing.T) {
	t.Parallel()
	env := []string{"CONSUL_HTTP_ADDR=127.0.0.1:1"}
	for _, args := range [][]string{
		{"check", "billing", "--epoch", "1"},
		{"history", "billing"},
		{"step-down", "billing"},
		{"pause", "billing", "--reason", "maintenance"},
		{"resume", "billing"},
	} {
		code, _, errOut, _ := runOnce(t, env, append(args, "--timeout", "5s")...)
		if code != 125 {
			t.Errorf("%s: exit %d, want 125\n%s", args[0], code, errOut)
			continue
		}
		for _, want := range []string{"consul, the default", "--backend", "--unit billing"} {
			if !strings.Contains(errOut, want) {
				t.Errorf("%s on the default backend does not say %q:\n%s", args[0], want, errOut)
			}
		}
		code, _, errOut, _ = runOnce(t, env, append(args, "--timeout", "5s", "--backend", "consul")...)
		if code != 125 || strings.Contains(errOut, "the default") {
			t.Errorf("%s --backend consul: exit %d, want 125 without a word of the default:\n%s", args[0], code, errOut)
		}
	}
}
