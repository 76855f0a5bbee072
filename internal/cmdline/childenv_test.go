//go:build linux

package cmdline

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/etcd/etcdwire"
)

// The job gets the endpoints leaderrun used under leaderrun's own names,
// never added under the names the backend's tools read: etcdctl 3.6 exits
// "conflicting environment variable is shadowed by corresponding
// command-line flag" when a legacy script passes --endpoints beside an
// ETCDCTL_ENDPOINTS the wrapper added. One the environment had already is
// passed on with the value leaderrun used.
func TestChildEnvAddsNoToolVariables(t *testing.T) {
	cfg := &runConfig{backend: etcdBackend, settings: &etcdSettings{Hello: etcdwire.Hello{Endpoints: []string{"10.0.0.1:2379", "10.0.0.2:2379"}, CACert: "/etc/ca.pem"}},
		opts: locker.Options{Key: "k", Prefix: "leaderrun", ID: "a"}}
	for _, name := range []string{"ETCDCTL_ENDPOINTS", "ETCDCTL_CACERT"} {
		t.Setenv(name, "") // restored at the end
		os.Unsetenv(name)
	}
	env := childEnv(cfg)
	for _, want := range []string{"LEADERRUN_ETCD_ENDPOINTS=10.0.0.1:2379,10.0.0.2:2379", "LEADERRUN_ETCD_CACERT=/etc/ca.pem", "LEADERRUN_BACKEND=etcd"} {
		if !slices.Contains(env, want) {
			t.Errorf("the job's environment lacks %s", want)
		}
	}
	for _, kv := range env {
		if strings.HasPrefix(kv, "ETCDCTL_") {
			t.Errorf("the job's environment has %s, which leaderrun added", kv)
		}
	}

	// Inherited: replaced by the value leaderrun used.
	t.Setenv("ETCDCTL_ENDPOINTS", "10.9.9.9:2379")
	env = childEnv(cfg)
	if !slices.Contains(env, "ETCDCTL_ENDPOINTS=10.0.0.1:2379,10.0.0.2:2379") || slices.Contains(env, "ETCDCTL_ENDPOINTS=10.9.9.9:2379") {
		t.Errorf("an inherited ETCDCTL_ENDPOINTS is not the one leaderrun used: %q", env)
	}
	if slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "ETCDCTL_CACERT=/") }) {
		t.Errorf("ETCDCTL_CACERT added: %q", env)
	}
}
