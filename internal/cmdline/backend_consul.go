//go:build linux

package cmdline

import (
	"encoding/json"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/leaderrun/leaderrun/internal/secretfile"
	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/consul"
	"github.com/leaderrun/leaderrun/locker/consul/consulwire"
)

const catConsul = "Consul"

var consulBackend = &backend{
	Name:     "consul",
	Title:    "Consul",
	Category: catConsul,
	Flags: func() []cli.Flag {
		return []cli.Flag{
			&cli.StringFlag{Name: "consul-addr", Category: catConsul, EnvVars: []string{"CONSUL_HTTP_ADDR"}, DefaultText: consulwire.DefaultAddress,
				Usage: "agent `ADDRESS`, or a comma-separated list of servers; https:// for TLS"},
			&cli.StringFlag{Name: "consul-token", Category: catConsul, EnvVars: []string{"CONSUL_HTTP_TOKEN"},
				Usage: "ACL `TOKEN` (prefer the file)"},
			&cli.StringFlag{Name: "consul-token-file", Category: catConsul, EnvVars: []string{"CONSUL_HTTP_TOKEN_FILE"},
				Usage: "`FILE` holding the ACL token"},
			&cli.StringFlag{Name: "consul-ca-file", Category: catConsul, EnvVars: []string{"CONSUL_CACERT"},
				Usage: "CA certificate `FILE`"},
			&cli.StringFlag{Name: "consul-client-cert", Category: catConsul, EnvVars: []string{"CONSUL_CLIENT_CERT"},
				Usage: "client certificate `FILE`"},
			&cli.StringFlag{Name: "consul-client-key", Category: catConsul, EnvVars: []string{"CONSUL_CLIENT_KEY"},
				Usage: "client key `FILE`"},
			&cli.StringFlag{Name: "consul-tls-server-name", Category: catConsul, EnvVars: []string{"CONSUL_TLS_SERVER_NAME"},
				Usage: "`NAME` to verify in the server's certificate"},
			&cli.StringFlag{Name: "consul-datacenter", Category: catConsul, EnvVars: []string{"CONSUL_DATACENTER"}, DefaultText: "the agent's",
				Usage: "Consul datacenter `NAME`"},
			&cli.DurationFlag{Name: "consul-lock-delay", Category: catConsul, EnvVars: []string{"LEADERRUN_CONSUL_LOCK_DELAY"}, DefaultText: "ttl, at most 60s",
				Usage: "session lock-delay"},
			&cli.StringSliceFlag{Name: "consul-session-checks", Category: catConsul, EnvVars: []string{"LEADERRUN_CONSUL_SESSION_CHECKS"},
				Usage: "opt-in session health `CHECK` (repeatable; needs lock-delay >= ttl)"},
		}
	},
	// A read creates no session.
	RunOnly: []string{"consul-lock-delay", "consul-session-checks"},
	Fields: map[string]string{
		"Address": "--consul-addr", "Token": "--consul-token", "TokenFile": "--consul-token-file",
		"CACert": "--consul-ca-file", "ClientCert": "--consul-client-cert", "ClientKey": "--consul-client-key",
		"TLSServerName": "--consul-tls-server-name", "Datacenter": "--consul-datacenter",
		"LockDelay": "--consul-lock-delay", "SessionChecks": "--consul-session-checks",
	},
	LeaseLeft: func(left string) string { return "at most " + left + " (Consul session TTL)" },
	Read: func(c *cli.Context, opts locker.Options) (backendSettings, error) {
		return &consulSettings{
			Hello: consulwire.Hello{
				Address:       c.String("consul-addr"),
				Token:         c.String("consul-token"),
				TokenFile:     c.String("consul-token-file"),
				CACert:        c.String("consul-ca-file"),
				ClientCert:    c.String("consul-client-cert"),
				ClientKey:     c.String("consul-client-key"),
				TLSServerName: c.String("consul-tls-server-name"),
				Datacenter:    c.String("consul-datacenter"),
			},
			LockDelay: consulLockDelay(c, opts.TTL),
			Checks:    c.StringSlice("consul-session-checks"),
		}, nil
	},
	FromHello: func(raw json.RawMessage) (backendSettings, error) {
		s := &consulSettings{}
		return s, unmarshalSettings(raw, &s.Hello)
	},
}

// consulSettings are the Consul options: the guard's part and the rest.
type consulSettings struct {
	consulwire.Hello
	LockDelay time.Duration
	Checks    []string
}

func (s *consulSettings) New(opts locker.Options, readOnly bool, log hclog.Logger) (locker.Locker, error) {
	if s.TokenFile != "" && !readOnly {
		if why := secretfile.Exposed(s.TokenFile); why != "" {
			log.Warn("the Consul token file is readable by others than its owner; chmod 600 it", "file", s.TokenFile, "why", why)
		}
	}
	return consul.New(consul.Config{
		Options:       opts,
		Address:       s.Address,
		Token:         s.Token,
		TokenFile:     s.TokenFile,
		CACert:        s.CACert,
		ClientCert:    s.ClientCert,
		ClientKey:     s.ClientKey,
		TLSServerName: s.TLSServerName,
		Datacenter:    s.Datacenter,
		LockDelay:     s.LockDelay,
		SessionChecks: s.Checks,
		Logger:        log.Named("consul"),
	})
}

func (s *consulSettings) ChildEnv() []envVar {
	var v []envVar
	v = setOption(v, "consul-addr", "CONSUL_HTTP_ADDR", s.Address)
	v = setOption(v, "consul-ca-file", "CONSUL_CACERT", s.CACert)
	v = setOption(v, "consul-client-cert", "CONSUL_CLIENT_CERT", s.ClientCert)
	v = setOption(v, "consul-client-key", "CONSUL_CLIENT_KEY", s.ClientKey)
	v = setOption(v, "consul-tls-server-name", "CONSUL_TLS_SERVER_NAME", s.TLSServerName)
	return setOption(v, "consul-datacenter", "CONSUL_DATACENTER", s.Datacenter)
}

func (s *consulSettings) Target(locker.Locker) (string, time.Duration) {
	if s.Address == "" {
		return consulwire.DefaultAddress, consul.DialTimeout
	}
	return s.Address, consul.DialTimeout
}

func (s *consulSettings) Guard(locker.Locker) (any, string) { return s.Hello, "" }

func (s *consulSettings) Scope() string { return "" }

// consulLockDelay is --consul-lock-delay, by default the TTL (at most
// Consul's 60s). Consul can invalidate a session early, whatever its checks:
// deregistering the node it was created through (a leaving or reaped agent)
// destroys it. The old leader may learn of it only at its own deadline, at
// most a TTL after its last renewal; a lock-delay that long keeps the key
// from everyone until then (DESIGN §1.5, applied to every session). A clean
// release frees the key without any lock-delay, so handovers stay fast.
func consulLockDelay(c *cli.Context, ttl time.Duration) time.Duration {
	if c.IsSet("consul-lock-delay") {
		return c.Duration("consul-lock-delay")
	}
	return min(ttl, consul.MaxLockDelay)
}
