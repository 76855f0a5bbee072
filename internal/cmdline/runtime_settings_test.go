//go:build linux

package cmdline

import "testing"

// TestRuntimeSettings: leaderrun runs on at most two threads of Go code
// and collects its garbage at half the default heap growth, unless the
// operator set GOMAXPROCS or GOGC, which the runtime has already applied.
func TestRuntimeSettings(t *testing.T) {
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
		cpus   int
		procs  int // 0: leave as is
		gc     int // 0: leave as is
	}{
		{"64 CPUs", env(), 64, 2, 50},
		{"2 CPUs", env(), 2, 0, 50},
		{"1 CPU", env(), 1, 0, 50},
		{"GOMAXPROCS set", env("GOMAXPROCS", "8"), 64, 0, 50},
		{"GOMAXPROCS set empty", env("GOMAXPROCS", ""), 64, 2, 50},
		{"GOGC set", env("GOGC", "200"), 64, 2, 0},
		{"GOGC off", env("GOGC", "off"), 4, 2, 0},
	} {
		procs, gc := runtimeSettings(tc.getenv, tc.cpus)
		if procs != tc.procs || gc != tc.gc {
			t.Errorf("%s: GOMAXPROCS %d, GOGC %d; want %d, %d", tc.name, procs, gc, tc.procs, tc.gc)
		}
	}
}
