package leaserow

import (
	"flag"
	"os"
	"runtime"
	"strconv"
	"testing"
)

// TestMain lets four of these tests run side by side on a machine with
// fewer CPUs, where go test would run one per CPU: they keep their rows
// in memory and spend their time waiting for their fake clocks to settle,
// not computing (each has a store of its own; see the t.Parallel calls).
// A -parallel given on the command line wins.
func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		_ = flag.Set("test.parallel", strconv.Itoa(max(4, runtime.GOMAXPROCS(0))))
	}
	os.Exit(m.Run())
}
