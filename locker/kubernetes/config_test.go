package kubernetes

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
)

func TestConfigRefusals(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(good, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: secret-token-value}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: jobs}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := locker.Options{Key: "billing", TTL: 3 * time.Second}
	for _, tc := range []struct {
		name  string
		cfg   Config
		field string
	}{
		{"missing kubeconfig", Config{Options: opts, Kubeconfig: filepath.Join(dir, "nope")}, "Kubeconfig"},
		{"unknown context", Config{Options: opts, Kubeconfig: good, Context: "other"}, "Kubeconfig"},
		{"TTL under a second", Config{Options: locker.Options{Key: "billing", TTL: 500 * time.Millisecond}, Kubeconfig: good}, "TTL"},
		{"bad key", Config{Options: locker.Options{Key: "../x", TTL: 3 * time.Second}, Kubeconfig: good}, "Key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			var ce *locker.ConfigError
			if !errors.As(err, &ce) || ce.Field != tc.field || !errors.Is(err, locker.ErrRefused) {
				t.Fatalf("New = %v, want a ConfigError on %s", err, tc.field)
			}
		})
	}

	l, err := New(Config{Options: opts, Kubeconfig: good})
	if err != nil {
		t.Fatal(err)
	}
	if l.Namespace() != "jobs" || l.Name() != "leaderrun.billing" {
		t.Fatalf("namespace %q name %q, want the context's jobs and leaderrun.billing", l.Namespace(), l.Name())
	}
	if l, _ := New(Config{Options: opts, Kubeconfig: good, Namespace: "other"}); l.Namespace() != "other" {
		t.Fatalf("namespace %q, want the one given", l.Namespace())
	}
}

func TestEpochOf(t *testing.T) {
	for rv, want := range map[string]uint64{"1": 1, "184467": 184467} {
		if got, err := epochOf(rv); err != nil || got != want {
			t.Errorf("epochOf(%q) = %d, %v", rv, got, err)
		}
	}
	for _, rv := range []string{"", "0", "abc", "-4", "1.5"} {
		if _, err := epochOf(rv); err == nil {
			t.Errorf("epochOf(%q) accepted a resourceVersion that is not a positive integer", rv)
		}
	}
}
