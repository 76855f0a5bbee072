//go:build linux

package cmdline

import (
	"encoding/json"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/postgres"
)

const catPostgres = "PostgreSQL"

var postgresBackend = &backend{
	Name:     "postgres",
	Title:    "a PostgreSQL table",
	Category: catPostgres,
	Flags: func() []cli.Flag {
		return []cli.Flag{
			&cli.StringFlag{Name: "pg-dsn", Category: catPostgres, EnvVars: []string{"LEADERRUN_PG_DSN"}, DefaultText: "the PG* variables, as psql reads them",
				Usage: "connection `STRING` or URL (host=db1 dbname=app sslmode=verify-full, postgres://user@db1/app); PGHOST, PGUSER, PGPASSWORD, PGSSLMODE... fill in the rest"},
			&cli.StringFlag{Name: "pg-schema", Category: catPostgres, EnvVars: []string{"LEADERRUN_PG_SCHEMA"}, Value: postgres.DefaultSchema,
				Usage: "`SCHEMA` of the lease table"},
			&cli.StringFlag{Name: "pg-table", Category: catPostgres, EnvVars: []string{"LEADERRUN_PG_TABLE"}, Value: postgres.DefaultTable,
				Usage: "lease `TABLE`, created when missing if the role may (also TABLE_epoch and TABLE_runs)"},
			&cli.DurationFlag{Name: "pg-connect-timeout", Category: catPostgres, EnvVars: []string{"LEADERRUN_PG_CONNECT_TIMEOUT"}, Value: postgres.DefaultConnectTimeout,
				Usage: "time allowed to connect, unless the DSN's connect_timeout or PGCONNECT_TIMEOUT says"},
		}
	},
	Fields: map[string]string{"DSN": "--pg-dsn", "Schema": "--pg-schema", "Table": "--pg-table", "ConnectTimeout": "--pg-connect-timeout"},
	Read: func(c *cli.Context, _ locker.Options) (backendSettings, error) {
		return &postgresSettings{
			DSN:            c.String("pg-dsn"),
			Schema:         c.String("pg-schema"),
			Table:          c.String("pg-table"),
			ConnectTimeout: c.Duration("pg-connect-timeout"),
		}, nil
	},
	FromHello: func(raw json.RawMessage) (backendSettings, error) {
		s := &postgresSettings{}
		return s, unmarshalSettings(raw, s)
	},
}

// postgresSettings are the PostgreSQL options; the guard (leaderrun
// itself) gets them all, and the PG* variables with its environment.
type postgresSettings struct {
	DSN            string        `json:"dsn,omitempty"`
	Schema         string        `json:"schema,omitempty"`
	Table          string        `json:"table,omitempty"`
	ConnectTimeout time.Duration `json:"connect_timeout,omitempty"`
}

func (s *postgresSettings) New(opts locker.Options, readOnly bool, log hclog.Logger) (locker.Locker, error) {
	l, err := postgres.New(postgres.Config{
		Options:        opts,
		DSN:            s.DSN,
		Schema:         s.Schema,
		Table:          s.Table,
		ConnectTimeout: s.ConnectTimeout,
		ReadOnly:       readOnly,
		Logger:         log.Named("postgres"),
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// ChildEnv passes the DSN without its password; the PG* variables reach
// the child anyway, with the environment.
func (s *postgresSettings) ChildEnv() []envVar {
	v := set(nil, "LEADERRUN_PG_DSN", dsnWithoutPassword(s.DSN))
	v = set(v, "LEADERRUN_PG_SCHEMA", s.Schema)
	return set(v, "LEADERRUN_PG_TABLE", s.Table)
}

var dsnPassword = regexp.MustCompile(`(^|\s)password\s*=\s*('([^'\\]|\\.)*'|\S*)`)

// dsnWithoutPassword is dsn with any password taken out (URL or
// keyword=value form; the spaces between keywords are normalised, which
// quoted values with runs of spaces do not survive).
func dsnWithoutPassword(dsn string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return ""
		}
		if u.User != nil {
			u.User = url.User(u.User.Username())
		}
		q := u.Query()
		if q.Has("password") {
			q.Del("password")
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	return strings.Join(strings.Fields(dsnPassword.ReplaceAllString(dsn, "$1")), " ")
}

func (s *postgresSettings) Target(lk locker.Locker) (string, time.Duration) {
	return targetOf(lk)
}

// Guard: leaderrun-guard has no PostgreSQL client, and one would double
// its size; leaderrun itself is the guard (DESIGN §1.9).
func (s *postgresSettings) Guard(locker.Locker) (any, string) {
	return s, "leaderrun-guard has no PostgreSQL client"
}

func (s *postgresSettings) Scope() string { return "" }
