//go:build linux

package cmdline

import (
	"encoding/json"
	"net/url"
	"slices"
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

// ChildEnv passes the DSN without its secrets; the PG* variables reach
// the child anyway, with the environment. A DSN with nothing left passes
// as empty, so that a LEADERRUN_PG_DSN leaderrun inherited does not reach
// the child whole.
func (s *postgresSettings) ChildEnv() []envVar {
	var v []envVar
	if s.DSN != "" {
		v = append(v, envVar{Name: "LEADERRUN_PG_DSN", Value: dsnWithoutSecrets(s.DSN)})
	}
	v = set(v, "LEADERRUN_PG_SCHEMA", s.Schema)
	return set(v, "LEADERRUN_PG_TABLE", s.Table)
}

// dsnSecrets are the connection parameters of libpq (and of pgx, which
// reads the same) whose value is a secret: the password, the passphrase
// of the client key, and an OAuth client's secret. Those naming files
// (passfile, sslkey) or saying how to authenticate (require_auth) are not
// secrets and stay.
var dsnSecrets = []string{"password", "sslpassword", "oauth_client_secret"}

func isDSNSecret(name string) bool {
	return slices.ContainsFunc(dsnSecrets, func(s string) bool { return strings.EqualFold(s, name) })
}

// dsnWithoutSecrets is dsn with every secret taken out (dsnSecrets, and
// the password of a URL's user), in URL or keyword=value form. A DSN that
// cannot be read gives "": better no DSN in the child's environment than
// a secret.
func dsnWithoutSecrets(dsn string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return ""
		}
		if u.User != nil {
			u.User = url.User(u.User.Username())
		}
		// A pair it cannot read is left out, as pgx leaves it out.
		q, err := url.ParseQuery(u.RawQuery)
		found := err != nil
		for name := range q {
			if isDSNSecret(name) {
				q.Del(name)
				found = true
			}
		}
		if found {
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	params, ok := splitKeywordDSN(dsn)
	if !ok {
		return ""
	}
	var kept []string
	for _, p := range params {
		if !isDSNSecret(p.name) {
			kept = append(kept, p.text)
		}
	}
	return strings.Join(kept, " ")
}

// dsnParam is one keyword=value of a DSN: its keyword, and its text as
// written (the value quoted and escaped as it was).
type dsnParam struct{ name, text string }

// splitKeywordDSN splits a keyword=value DSN as libpq reads it: white
// space around '=' and between parameters, a value either in single
// quotes or up to the next white space, a backslash escaping the next
// character in either. ok is false for text libpq would refuse.
func splitKeywordDSN(dsn string) (params []dsnParam, ok bool) {
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' }
	i, n := 0, len(dsn)
	for {
		for i < n && isSpace(dsn[i]) {
			i++
		}
		if i == n {
			return params, true
		}
		start := i
		for i < n && !isSpace(dsn[i]) && dsn[i] != '=' {
			i++
		}
		name := dsn[start:i]
		for i < n && isSpace(dsn[i]) {
			i++
		}
		if name == "" || i == n || dsn[i] != '=' {
			return nil, false
		}
		i++
		for i < n && isSpace(dsn[i]) {
			i++
		}
		if i < n && dsn[i] == '\'' {
			i++
			for ; i < n && dsn[i] != '\''; i++ {
				if dsn[i] == '\\' {
					i++
				}
			}
			if i >= n {
				return nil, false // no closing quote
			}
			i++
		} else {
			for ; i < n && !isSpace(dsn[i]); i++ {
				if dsn[i] == '\\' {
					i++
				}
			}
			i = min(i, n)
		}
		params = append(params, dsnParam{name: name, text: dsn[start:i]})
	}
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
