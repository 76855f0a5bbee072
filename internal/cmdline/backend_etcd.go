//go:build linux

package cmdline

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/etcd"
	"github.com/leaderrun/leaderrun/locker/etcd/etcdwire"
)

const catEtcd = "etcd"

var etcdBackend = &backend{
	Name:     "etcd",
	Title:    "etcd",
	Category: catEtcd,
	Flags: func() []cli.Flag {
		return []cli.Flag{
			&cli.StringFlag{Name: "etcd-endpoints", Category: catEtcd, EnvVars: []string{"ETCDCTL_ENDPOINTS"}, Value: "127.0.0.1:2379",
				Usage: "comma-separated `ENDPOINTS`"},
			&cli.StringFlag{Name: "etcd-user", Category: catEtcd, EnvVars: []string{"ETCDCTL_USER"},
				Usage: "`USER` or USER:PASSWORD"},
			&cli.StringFlag{Name: "etcd-password", Category: catEtcd, EnvVars: []string{"ETCDCTL_PASSWORD"},
				Usage: "`PASSWORD` for --etcd-user"},
			&cli.StringFlag{Name: "etcd-cacert", Category: catEtcd, EnvVars: []string{"ETCDCTL_CACERT"},
				Usage: "CA certificate `FILE`"},
			&cli.StringFlag{Name: "etcd-cert", Category: catEtcd, EnvVars: []string{"ETCDCTL_CERT"},
				Usage: "client certificate `FILE`"},
			&cli.StringFlag{Name: "etcd-key", Category: catEtcd, EnvVars: []string{"ETCDCTL_KEY"},
				Usage: "client key `FILE`"},
			&cli.DurationFlag{Name: "etcd-dial-timeout", Category: catEtcd, EnvVars: []string{"ETCDCTL_DIAL_TIMEOUT"}, Value: 5 * time.Second,
				Usage: "time allowed to connect"},
		}
	},
	Fields: map[string]string{
		"Endpoints": "--etcd-endpoints", "Username": "--etcd-user", "Password": "--etcd-password",
		"CACert": "--etcd-cacert", "Cert": "--etcd-cert", "Key": "--etcd-key", "DialTimeout": "--etcd-dial-timeout",
	},
	Read: func(c *cli.Context, _ locker.Options) (backendSettings, error) {
		return &etcdSettings{etcdwire.Hello{
			Endpoints:   splitList(c.String("etcd-endpoints")),
			User:        c.String("etcd-user"),
			Password:    c.String("etcd-password"),
			CACert:      c.String("etcd-cacert"),
			Cert:        c.String("etcd-cert"),
			Key:         c.String("etcd-key"),
			DialTimeout: c.Duration("etcd-dial-timeout"),
		}}, nil
	},
	FromHello: func(raw json.RawMessage) (backendSettings, error) {
		s := &etcdSettings{}
		return s, unmarshalSettings(raw, &s.Hello)
	},
}

// etcdSettings are the etcd options; the guard needs them all.
type etcdSettings struct{ etcdwire.Hello }

func (s *etcdSettings) New(opts locker.Options, _ bool, log hclog.Logger) (locker.Locker, error) {
	return etcd.New(etcd.Config{
		Options:     opts,
		Endpoints:   s.Endpoints,
		Username:    s.User,
		Password:    s.Password,
		CACert:      s.CACert,
		Cert:        s.Cert,
		Key:         s.Key,
		DialTimeout: s.DialTimeout,
		Logger:      log.Named("etcd"),
	})
}

func (s *etcdSettings) ChildEnv() []envVar {
	var v []envVar
	v = set(v, "ETCDCTL_ENDPOINTS", strings.Join(s.Endpoints, ","))
	v = set(v, "ETCDCTL_CACERT", s.CACert)
	v = set(v, "ETCDCTL_CERT", s.Cert)
	return set(v, "ETCDCTL_KEY", s.Key)
}

func (s *etcdSettings) Target(locker.Locker) (string, time.Duration) {
	return strings.Join(s.Endpoints, ","), s.DialTimeout
}

func (s *etcdSettings) Guard(locker.Locker) (any, string) { return s.Hello, "" }

func (s *etcdSettings) Scope() string { return "" }
