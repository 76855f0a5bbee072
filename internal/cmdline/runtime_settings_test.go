//go:build linux

package cmdline

import "testing"

// TestRuntimeProcs: leaderrun runs its Go code on at most two threads,
// unless the operator set GOMAXPROCS, which the runtime has already
// applied.
func TestRuntimeProcs(t *testing.T) {
	env := func(kv ...string) func(string) (string, bool) {
		return func(k string) (string, bool) {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1], true
				}
			}
			return "", false
		}
	}
	for _, tc := range []struct {
		name   string
		getenv func(string) (string, bool)
		procs  int
		want   int // 0: leave as is
	}{
		{"64 CPUs", env(), 64, 2},
		{"3 CPUs", env(), 3, 2},
		{"2 CPUs", env(), 2, 0},
		{"1 CPU", env(), 1, 0},
		{"GOMAXPROCS set", env("GOMAXPROCS", "8"), 8, 0},
		{"GOMAXPROCS set empty", env("GOMAXPROCS", ""), 64, 2},
		{"GOGC set", env("GOGC", "200"), 64, 2},
	} {
		if got := runtimeProcs(tc.getenv, tc.procs); got != tc.want {
			t.Errorf("%s: GOMAXPROCS %d; want %d", tc.name, got, tc.want)
		}
	}
}
