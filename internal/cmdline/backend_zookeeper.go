//go:build linux

package cmdline

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

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
				Usage: "digest credentials `USER:PASSWORD`; znodes become creator-only"},
		}
	},
	Fields: map[string]string{"Servers": "--zk-servers", "Chroot": "--zk-chroot", "Auth": "--zk-auth"},
	Read: func(c *cli.Context, opts locker.Options) (backendSettings, error) {
		return &zookeeperSettings{
			Hello: zkwire.Hello{
				Servers:        splitList(c.String("zk-servers")),
				Chroot:         c.String("zk-chroot"),
				Auth:           c.String("zk-auth"),
				SessionTimeout: opts.TTL,
			},
			// Commands without the flag (status, check) read 0: no check.
			SafetyMargin: c.Duration("safety-margin"),
		}, nil
	},
	FromHello: func(raw json.RawMessage) (backendSettings, error) {
		s := &zookeeperSettings{}
		return s, unmarshalSettings(raw, &s.Hello)
	},
}

// zookeeperSettings are the ZooKeeper options. SafetyMargin is
// --safety-margin, which the backend checks against the ensemble's
// tickTime when it first campaigns (the guard never campaigns).
type zookeeperSettings struct {
	zkwire.Hello
	SafetyMargin time.Duration
}

func (s *zookeeperSettings) New(opts locker.Options, _ bool, log hclog.Logger) (locker.Locker, error) {
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

func (s *zookeeperSettings) Guard(locker.Locker) (any, string) { return s.Hello, "" }

func (s *zookeeperSettings) Scope() string { return "" }
