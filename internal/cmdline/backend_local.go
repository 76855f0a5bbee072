//go:build linux

package cmdline

import (
	"encoding/json"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/local"
)

const catLocal = "Local backend"

var localBackend = &backend{
	Name:     "local",
	Title:    "a local lock file",
	Category: catLocal,
	Flags: func() []cli.Flag {
		return []cli.Flag{
			&cli.StringFlag{Name: "lock-dir", Category: catLocal, EnvVars: []string{"LEADERRUN_LOCK_DIR"}, DefaultText: "/run/leaderrun for root",
				Usage: "lock `DIR`, an absolute path; /tmp/leaderrun-UID for other users, owner-checked"},
			&cli.StringFlag{Name: "state-dir", Category: catLocal, EnvVars: []string{"LEADERRUN_STATE_DIR"}, DefaultText: "--lock-dir unless tmpfs, else /var/lib/leaderrun for root, /var/tmp/leaderrun-UID for others",
				Usage: "absolute `DIR` keeping the run records and a copy of the epoch across reboots"},
		}
	},
	Fields:   map[string]string{"Dir": "--lock-dir", "LockDir": "--lock-dir", "StateDir": "--state-dir"},
	FileFlag: "--lock-dir",
	NoExpiry: "local flock, no expiry",
	Read: func(c *cli.Context, _ locker.Options) (backendSettings, error) {
		return &localSettings{Dir: c.String("lock-dir"), StateDir: c.String("state-dir")}, nil
	},
	FromHello: func(raw json.RawMessage) (backendSettings, error) {
		s := &localSettings{}
		return s, unmarshalSettings(raw, s)
	},
}

// localSettings are the local backend's options. The guard releases a
// local lock by closing the descriptor it holds, so it reads none of them.
type localSettings struct {
	Dir      string `json:"lock_dir,omitempty"`
	StateDir string `json:"state_dir,omitempty"`
}

func (s *localSettings) New(opts locker.Options, readOnly bool, _ hclog.Logger) (locker.Locker, error) {
	l, err := local.New(local.Config{Options: opts, Dir: s.Dir, StateDir: s.StateDir, ReadOnly: readOnly})
	if err != nil {
		return nil, err
	}
	return l, nil
}

func (s *localSettings) ChildEnv() []envVar {
	v := set(nil, "LEADERRUN_LOCK_DIR", s.Dir)
	return set(v, "LEADERRUN_STATE_DIR", s.StateDir)
}

func (s *localSettings) Target(locker.Locker) (string, time.Duration) { return s.dir(), 0 }

func (s *localSettings) Guard(locker.Locker) (any, string) { return s, "" }

// Scope is the lock directory: each directory is a leadership of its own,
// however a run names it. Its symlinks are resolved as far as it exists
// (/var/run is /run on most hosts), so runs that name it two ways, and
// take the same lock, sweep each other's leftover jobs (DESIGN §1.9).
func (s *localSettings) Scope() string { return realDir(s.dir()) }

// realDir is dir absolute, with the symlinks of its longest existing part
// resolved and the rest joined as it is.
func realDir(dir string) string {
	d, err := filepath.Abs(dir)
	if err != nil {
		return filepath.Clean(dir)
	}
	abs, rest := d, ""
	for {
		if r, err := filepath.EvalSymlinks(d); err == nil {
			return filepath.Join(r, rest)
		}
		up := filepath.Dir(d)
		if up == d {
			return abs
		}
		rest = filepath.Join(filepath.Base(d), rest)
		d = up
	}
}

func (s *localSettings) dir() string {
	if s.Dir == "" {
		return local.DefaultDir()
	}
	return s.Dir
}
