//go:build linux

package cmdline

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/leaderrun/leaderrun/locker"
)

// fakeBackend is a backend known to the tests alone: TestMain lists it
// when LEADERRUN_TEST_FAKE_BACKEND=1, with no other edit anywhere. Its
// server never answers, so an attempt ends only by the bound it names.
var fakeBackend = &backend{
	Name:     "fakedb",
	Title:    "FakeDB",
	Category: "FakeDB",
	Flags: func() []cli.Flag {
		return []cli.Flag{
			&cli.StringFlag{Name: "fakedb-addr", Category: "FakeDB", EnvVars: []string{"LEADERRUN_FAKEDB_ADDR"}, Value: "fakedb.invalid:7",
				Usage: "FakeDB server `ADDRESS`"},
		}
	},
	Fields: map[string]string{"Addr": "--fakedb-addr"},
	Read: func(c *cli.Context, _ locker.Options) (backendSettings, error) {
		return &fakeSettings{Addr: c.String("fakedb-addr")}, nil
	},
	FromHello: func(raw json.RawMessage) (backendSettings, error) {
		s := &fakeSettings{}
		return s, unmarshalSettings(raw, s)
	},
}

type fakeSettings struct {
	Addr string `json:"addr"`
}

func (s *fakeSettings) New(locker.Options, bool, hclog.Logger) (locker.Locker, error) {
	return silentLocker{}, nil
}
func (s *fakeSettings) ChildEnv() []envVar { return set(nil, "FAKEDB_ADDR", s.Addr) }
func (s *fakeSettings) Target(locker.Locker) (string, time.Duration) {
	return "fakedb://" + s.Addr, 300 * time.Millisecond
}
func (s *fakeSettings) Guard(locker.Locker) (any, string) { return s, "" }
func (s *fakeSettings) Scope() string                     { return "" }

// silentLocker is a backend whose server never answers.
type silentLocker struct{}

func (silentLocker) Acquire(ctx context.Context) (locker.Lease, error) {
	<-ctx.Done()
	return nil, fmt.Errorf("fakedb: no answer: %w", ctx.Err())
}
func (silentLocker) Leader(ctx context.Context) (locker.Holder, error) {
	<-ctx.Done()
	return locker.Holder{}, ctx.Err()
}
func (silentLocker) ReleaseHandle(context.Context, string) error { return nil }
func (silentLocker) Close() error                                { return nil }

// TestRegisteredBackendReachesEveryList registers a backend in a test-only
// list and finds it, with no other edit, in help (all, its own, and the
// backends --help names), the man page, both
// completions, --backend's error, and a --no-wait attempt that names its
// target and ends within the bound the backend gives.
func TestRegisteredBackendReachesEveryList(t *testing.T) {
	fake := []string{"LEADERRUN_TEST_FAKE_BACKEND=1"}
	for _, args := range [][]string{{"help", "all"}, {"help", "fakedb"}} {
		_, help, _ := leaderrun(t, fake, args...)
		for _, want := range []string{"fakedb", "FakeDB:", "--fakedb-addr ADDRESS"} {
			if !strings.Contains(help, want) {
				t.Errorf("%s lacks %q", strings.Join(args, " "), want)
			}
		}
	}
	if _, help, _ := leaderrun(t, fake, "--help"); !strings.Contains(help, "fakedb") {
		t.Errorf("--help does not name fakedb among the backends")
	}
	_, man, _ := leaderrun(t, fake, "gen", "man")
	for _, want := range []string{"FakeDB", `\-\-fakedb\-addr`} {
		if !strings.Contains(man, want) {
			t.Errorf("the man page lacks %q", want)
		}
	}
	for _, shell := range []string{"bash", "zsh"} {
		_, script, _ := leaderrun(t, fake, "gen", shell)
		if i := strings.Index(script, "--backend)"); i < 0 || !strings.Contains(script[i:], "fakedb") {
			t.Errorf("the %s completion does not offer fakedb", shell)
		}
	}
	_, _, errOut := leaderrun(t, fake, "--backend", "nosuch", "--key", "k", "--", "true")
	if !strings.Contains(errOut, "fakedb") {
		t.Errorf("--backend's error does not name fakedb: %s", errOut)
	}

	start := time.Now()
	code, _, errOut := leaderrun(t, fake, "--backend", "fakedb", "--fakedb-addr", "db1:9", "--no-wait", "--no-guard", "--key", "k", "--", "true")
	if code != 125 || !strings.Contains(errOut, "fakedb://db1:9") {
		t.Errorf("--no-wait on fakedb: exit %d, stderr:\n%s\nwant 125 naming fakedb://db1:9", code, errOut)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("the attempt took %v: the backend's bound was not applied", took)
	}
}
