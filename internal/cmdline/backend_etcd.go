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
				Usage: "`PASSWORD` for --etcd-user (prefer the file)"},
			&cli.StringFlag{Name: "etcd-password-file", Category: catEtcd, EnvVars: []string{"LEADERRUN_ETCD_PASSWORD_FILE"},
				Usage: "`FILE` holding the password for --etcd-user (less one trailing newline); wins over --etcd-password"},
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
		"Endpoints": "--etcd-endpoints", "Username": "--etcd-user", "Password": "--etcd-password", "PasswordFile": "--etcd-password-file",
		"CACert": "--etcd-cacert", "Cert": "--etcd-cert", "Key": "--etcd-key", "DialTimeout": "--etcd-dial-timeout",
	},
	Read: func(c *cli.Context, _ locker.Options) (backendSettings, error) {
		s := &etcdSettings{Hello: etcdwire.Hello{
			Endpoints:   splitList(c.String("etcd-endpoints")),
			CACert:      c.String("etcd-cacert"),
			Cert:        c.String("etcd-cert"),
			Key:         c.String("etcd-key"),
			DialTimeout: c.Duration("etcd-dial-timeout"),
		}}
		return s, s.readCredentials(c.String("etcd-user"), c.String("etcd-password"), c.String("etcd-password-file"))
	},
	FromHello: func(raw json.RawMessage) (backendSettings, error) {
		s := &etcdSettings{}
		return s, unmarshalSettings(raw, &s.Hello)
	},
}

// etcdSettings are the etcd options; the guard needs them all. Password
// holds the password however it was given; exposed says why the password
// file is readable by others than its owner ("" when it is not).
type etcdSettings struct {
	etcdwire.Hello
	exposed string
}

// readCredentials reads --etcd-user, --etcd-password and
// --etcd-password-file, once, before anything logs them or passes them
// on. USER:PASSWORD, etcdctl's form, is split here when no password is
// given otherwise (then, as with etcdctl, the user name is taken whole).
// The file wins over --etcd-password, as Consul's token file over its
// token.
func (s *etcdSettings) readCredentials(user, password, file string) error {
	if file != "" {
		pw, err := secretfile.Read(file)
		if err != nil {
			return fmt.Errorf("--etcd-password-file must name a readable file holding the password: %s: %w", file, err)
		}
		password = pw
		s.PasswordFile = file
		s.exposed = secretfile.Exposed(file)
	}
	if password == "" {
		if u, p, ok := strings.Cut(user, ":"); ok {
			user, password = u, p
		}
	}
	s.User, s.Password = user, password
	return nil
}

func (s *etcdSettings) New(opts locker.Options, readOnly bool, log hclog.Logger) (locker.Locker, error) {
	if s.Password == "" && s.PasswordFile != "" {
		// Settings from a guard's hello: the file's name, not the password.
		pw, err := secretfile.Read(s.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("--etcd-password-file %s: %w", s.PasswordFile, err)
		}
		s.Password = pw
	}
	if s.exposed != "" && !readOnly {
		log.Warn("the etcd password file is readable by others than its owner; chmod 600 it", "file", s.PasswordFile, "why", s.exposed)
	}
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
	v = setOption(v, "etcd-endpoints", "ETCDCTL_ENDPOINTS", strings.Join(s.Endpoints, ","))
	v = setOption(v, "etcd-cacert", "ETCDCTL_CACERT", s.CACert)
	v = setOption(v, "etcd-cert", "ETCDCTL_CERT", s.Cert)
	return setOption(v, "etcd-key", "ETCDCTL_KEY", s.Key)
}

func (s *etcdSettings) Target(locker.Locker) (string, time.Duration) {
	return strings.Join(s.Endpoints, ","), s.DialTimeout
}

// Guard: a password read from a file goes to the guard as the file's
// name; the guard reads the file when it releases.
func (s *etcdSettings) Guard(locker.Locker) (any, string) {
	h := s.Hello
	if h.PasswordFile != "" {
		h.Password = ""
	}
	return h, ""
}

func (s *etcdSettings) Scope() string { return "" }
