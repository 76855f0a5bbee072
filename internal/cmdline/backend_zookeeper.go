//go:build linux

package cmdline

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/leaderrun/leaderrun/internal/secretfile"
	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/zookeeper"
	"github.com/leaderrun/leaderrun/locker/zookeeper/zkwire"
)

const catZooKeeper = "ZooKeeper"

var zookeeperBackend = &backend{
	Name:     "zookeeper",
	Title:    "ZooKeeper",
	Category: catZooKeeper,
	Flags: func() []cli.Flag {
		return []cli.Flag{
			&cli.StringFlag{Name: "zk-servers", Category: catZooKeeper, EnvVars: []string{"LEADERRUN_ZK_SERVERS", "ZOOKEEPER_SERVERS"}, Value: zookeeper.DefaultServer,
				Usage: "comma-separated host:port `LIST`, optionally ending in a chroot (h1:2181,h2:2181/apps)"},
			&cli.StringFlag{Name: "zk-chroot", Category: catZooKeeper, EnvVars: []string{"LEADERRUN_ZK_CHROOT"},
				Usage: "znode `PATH` under which leaderrun works"},
			&cli.StringFlag{Name: "zk-auth", Category: catZooKeeper, EnvVars: []string{"LEADERRUN_ZK_AUTH"},
				Usage: "digest credentials `USER:PASSWORD`; znodes become creator-only (prefer the file)"},
			&cli.StringFlag{Name: "zk-auth-file", Category: catZooKeeper, EnvVars: []string{"LEADERRUN_ZK_AUTH_FILE"},
				Usage: "`FILE` holding the digest credentials USER:PASSWORD (less one trailing newline); wins over --zk-auth"},
		}
	},
	Fields: map[string]string{"Servers": "--zk-servers", "Chroot": "--zk-chroot", "Auth": "--zk-auth"},
	Read: func(c *cli.Context, opts locker.Options) (backendSettings, error) {
		s := &zookeeperSettings{
			Hello: zkwire.Hello{
				Servers:        splitList(c.String("zk-servers")),
				Chroot:         c.String("zk-chroot"),
				Auth:           c.String("zk-auth"),
				SessionTimeout: opts.TTL,
			},
			// Commands without the flag (status, check) read 0: no check.
			SafetyMargin: c.Duration("safety-margin"),
		}
		if file := c.String("zk-auth-file"); file != "" {
			// Read once, here; the file wins over --zk-auth.
			auth, err := secretfile.Read(file)
			if err != nil {
				return nil, fmt.Errorf("--zk-auth-file must name a readable file holding USER:PASSWORD: %s: %w", file, err)
			}
			if u, p, ok := strings.Cut(auth, ":"); !ok || u == "" || p == "" {
				return nil, fmt.Errorf("--zk-auth-file %s must hold USER:PASSWORD (ZooKeeper digest scheme)", file)
			}
			s.Auth, s.authFile, s.exposed = auth, file, secretfile.Exposed(file)
		}
		return s, nil
	},
	FromHello: func(raw json.RawMessage) (backendSettings, error) {
		s := &zookeeperSettings{}
		return s, unmarshalSettings(raw, &s.Hello)
	},
}

// zookeeperSettings are the ZooKeeper options. SafetyMargin is
// --safety-margin, which the backend checks against the ensemble's
// tickTime when it first campaigns (the guard never campaigns). authFile
// is --zk-auth-file, and exposed why others than its owner may read it
// ("" when they cannot).
type zookeeperSettings struct {
	zkwire.Hello
	SafetyMargin      time.Duration
	authFile, exposed string
}

func (s *zookeeperSettings) New(opts locker.Options, readOnly bool, log hclog.Logger) (locker.Locker, error) {
	if s.exposed != "" && !readOnly {
		log.Warn("the ZooKeeper auth file is readable by others than its owner; chmod 600 it", "file", s.authFile, "why", s.exposed)
	}
	l, err := zookeeper.New(zookeeper.Config{
		Options:      opts,
		Servers:      s.Servers,
		Chroot:       s.Chroot,
		Auth:         s.Auth,
		Logger:       log.Named("zookeeper"),
		SafetyMargin: s.SafetyMargin,
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

func (s *zookeeperSettings) ChildEnv() []envVar {
	v := set(nil, "LEADERRUN_ZK_SERVERS", strings.Join(s.Servers, ","))
	return set(v, "LEADERRUN_ZK_CHROOT", s.Chroot)
}

func (s *zookeeperSettings) Target(lk locker.Locker) (string, time.Duration) {
	return targetOf(lk)
}

// Guard: the guard names the released znode in the key's release record,
// a write that needs the digest credentials where znodes are
// creator-only. Given in a file, the hello carries the file's name and
// the guard reads it when it releases; given as --zk-auth, the value the
// user put on the command line.
func (s *zookeeperSettings) Guard(locker.Locker) (any, string) {
	h := s.Hello
	if s.authFile != "" {
		h.Auth, h.AuthFile = "", s.authFile
	}
	return h, ""
}

func (s *zookeeperSettings) Scope() string { return "" }
