//go:build linux

package cmdline

import (
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/leaderrun/leaderrun/locker"
)

// A backend is all the command line knows of one backend: its options,
// how they become a Locker, what the child and the guard are told, and
// what a --no-wait attempt names. Each lives in its own file
// (backend_<name>.go) and is listed once, in backends; help, the man page,
// completions, --backend's check and the leftover sweep read the list.
type backend struct {
	// Name is the value of --backend.
	Name string
	// Title is how prose names it: "a Kubernetes Lease".
	Title string
	// Category is the help group of its options.
	Category string
	// Flags are its options, all in Category.
	Flags func() []cli.Flag
	// RunOnly names those of Flags that only a run uses (how a lease is
	// created); status and check accept them but do not list them.
	RunOnly []string
	// Fields maps the Config fields its library names in a
	// *locker.ConfigError to the options an operator types.
	Fields map[string]string
	// NoExpiry, for a backend whose lease lasts as long as its holder's
	// process, says so in status ("local flock, no expiry").
	NoExpiry string
	// LeaseLeft words a lease's time left for status, where the backend's
	// own terms differ from "5s left (NAME lease TTL)".
	LeaseLeft func(left string) string
	// FileFlag is the option a file error of its library is about, for
	// a backend that keeps its keys in files ("--lock-dir").
	FileFlag string
	// Read reads its options; opts are the settings every backend shares.
	Read func(c *cli.Context, opts locker.Options) (backendSettings, error)
	// FromHello rebuilds the settings from the guard's hello (the
	// Settings of guard.BackendHello), for a release by leaderrun itself.
	FromHello func(settings json.RawMessage) (backendSettings, error)
}

// backendSettings are one backend's options, as read from the command
// line and the environment, or from the guard's hello.
type backendSettings interface {
	// New builds the Locker; readOnly (status, check) creates nothing.
	New(opts locker.Options, readOnly bool, log hclog.Logger) (locker.Locker, error)
	// ChildEnv are the variables that let the child, and `leaderrun check`
	// run by it, reach the same backend. Secrets are never among them.
	ChildEnv() []envVar
	// Target is what one --no-wait attempt talks to, for its error line,
	// and how long the attempt may take (0: no bound of its own).
	Target(lk locker.Locker) (string, time.Duration)
	// Guard is what the guard's hello carries for this backend, and why
	// leaderrun-guard could not release the lease by itself ("" when it
	// can); lk is the Locker New built.
	Guard(lk locker.Locker) (hello any, whyFull string)
	// Scope is what names the leadership besides backend, prefix and key,
	// for the sweep of leftover jobs: the lock directory of the local
	// backend, "" for the others (DESIGN §1.9).
	Scope() string
}

// envVar is one variable of the child's environment.
type envVar struct {
	Name, Value string
	// Inherited: set only where the job's environment has the variable
	// already (its value replaced by the one leaderrun used), never added.
	// The variables a backend's own tools read (ETCDCTL_ENDPOINTS,
	// CONSUL_HTTP_ADDR, KUBECONFIG) are such: added, they change what a
	// legacy script's tools do (etcdctl refuses --endpoints beside
	// ETCDCTL_ENDPOINTS).
	Inherited bool
}

// backends are the backends --backend accepts, in the order help,
// completions and errors name them.
var backends = []*backend{consulBackend, etcdBackend, zookeeperBackend, kubernetesBackend, postgresBackend, dynamodbBackend, localBackend}

// defaultBackend is --backend when nothing sets it.
const defaultBackend = "consul"

// backendNamed is the backend called name, or nil.
func backendNamed(name string) *backend {
	for _, b := range backends {
		if b.Name == name {
			return b
		}
	}
	return nil
}

// backendNames are the backends' names, in their order.
func backendNames() []string {
	names := make([]string, len(backends))
	for i, b := range backends {
		names[i] = b.Name
	}
	return names
}

// backendList names the backends as prose: "consul, etcd, ... or local".
func backendList() string {
	names := backendNames()
	n := len(names)
	return strings.Join(names[:n-1], ", ") + " or " + names[n-1]
}

// backendTitles names what the backends keep leadership in, as prose:
// "Consul, etcd, ZooKeeper, a Kubernetes Lease or a local lock file".
func backendTitles() string {
	var titles []string
	for _, b := range backends {
		titles = append(titles, b.Title)
	}
	n := len(titles)
	return strings.Join(titles[:n-1], ", ") + " or " + titles[n-1]
}

// allBackendFlags are every backend's options, in the backends' order.
func allBackendFlags() []cli.Flag {
	var flags []cli.Flag
	for _, b := range backends {
		flags = append(flags, b.Flags()...)
	}
	return flags
}

// runOnlyFlag reports whether name is an option a backend lists as
// RunOnly.
func runOnlyFlag(name string) bool {
	for _, b := range backends {
		if slices.Contains(b.RunOnly, name) {
			return true
		}
	}
	return false
}

// backendCategories are the help groups of the backends' options.
func backendCategories() []string {
	var cats []string
	for _, b := range backends {
		cats = append(cats, b.Category)
	}
	return cats
}

// unmarshalSettings decodes a hello's settings into v; none leaves v as is.
func unmarshalSettings(raw json.RawMessage, v any) error {
	if len(raw) == 0 {
		return nil
	}
	return json.Unmarshal(raw, v)
}

// set appends name=value to vars when value is not empty.
func set(vars []envVar, name, value string) []envVar {
	if value == "" {
		return vars
	}
	return append(vars, envVar{Name: name, Value: value})
}

// setOption is set for the value of option --flag, which the job gets as
// LEADERRUN_<FLAG> (what a leaderrun it runs reads for that option), and as
// tool, the variable the backend's own tools read, only where the job's
// environment has tool already.
func setOption(vars []envVar, flag, tool, value string) []envVar {
	if value == "" {
		return vars
	}
	return append(vars, envVar{Name: ruleEnv(flag), Value: value}, envVar{Name: tool, Value: value, Inherited: true})
}

// targetOf is what lk's single attempt talks to, where the backend names
// it itself (locker.Targeter), or nothing.
func targetOf(lk locker.Locker) (string, time.Duration) {
	if t, ok := locker.As[locker.Targeter](lk); ok {
		return t.Target()
	}
	return "", 0
}
