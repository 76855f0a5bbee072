//go:build linux

package cmdline

import "testing"

// TestRuntimeProcs: leaderrun runs its Go code on one thread at a time,
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
		{"64 CPUs", env(), 64, 1},
		{"3 CPUs", env(), 3, 1},
		{"2 CPUs", env(), 2, 1},
		{"1 CPU", env(), 1, 0},
		{"GOMAXPROCS set", env("GOMAXPROCS", "8"), 8, 0},
		{"GOMAXPROCS set to 2", env("GOMAXPROCS", "2"), 2, 0},
		{"GOMAXPROCS set empty", env("GOMAXPROCS", ""), 64, 1},
		{"GOGC set", env("GOGC", "200"), 64, 1},
	} {
		if got := runtimeProcs(tc.getenv, tc.procs); got != tc.want {
			t.Errorf("%s: GOMAXPROCS %d; want %d", tc.name, got, tc.want)
		}
	}
}
