//go:build linux

package cmdline

import (
	"encoding/json"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/dynamodb"
)

const catDynamoDB = "DynamoDB"

var dynamodbBackend = &backend{
	Name:     "dynamodb",
	Title:    "a DynamoDB table",
	Category: catDynamoDB,
	Flags: func() []cli.Flag {
		return []cli.Flag{
			&cli.StringFlag{Name: "dynamodb-table", Category: catDynamoDB, EnvVars: []string{"LEADERRUN_DYNAMODB_TABLE"}, Value: dynamodb.DefaultTable,
				Usage: "`TABLE` of the lease items (partition key \"key\", a string)"},
			&cli.BoolFlag{Name: "dynamodb-create-table", Category: catDynamoDB, EnvVars: []string{"LEADERRUN_DYNAMODB_CREATE_TABLE"},
				Usage: "create the table (on-demand capacity) when it is missing, instead of refusing to start"},
			&cli.StringFlag{Name: "dynamodb-region", Category: catDynamoDB, EnvVars: []string{"LEADERRUN_DYNAMODB_REGION"}, DefaultText: "AWS_REGION, or the profile's",
				Usage: "AWS `REGION` of the table"},
			&cli.StringFlag{Name: "dynamodb-endpoint", Category: catDynamoDB, EnvVars: []string{"LEADERRUN_DYNAMODB_ENDPOINT"}, DefaultText: "AWS_ENDPOINT_URL_DYNAMODB, or the region's",
				Usage: "endpoint `URL` (a VPC endpoint, a local test server); credentials come from the AWS chain (variables, AWS_PROFILE, SSO, web identity, instance role)"},
			&cli.DurationFlag{Name: "dynamodb-timeout", Category: catDynamoDB, EnvVars: []string{"LEADERRUN_DYNAMODB_TIMEOUT"}, Value: dynamodb.DefaultTimeout,
				Usage: "time allowed to connect and for each call outside a renewal"},
		}
	},
	Fields: map[string]string{"Table": "--dynamodb-table", "Region": "--dynamodb-region", "Endpoint": "--dynamodb-endpoint",
		"Timeout": "--dynamodb-timeout", "AWS": "the AWS configuration"},
	Read: func(c *cli.Context, _ locker.Options) (backendSettings, error) {
		return &dynamodbSettings{
			Table:       c.String("dynamodb-table"),
			CreateTable: c.Bool("dynamodb-create-table"),
			Region:      c.String("dynamodb-region"),
			Endpoint:    c.String("dynamodb-endpoint"),
			Timeout:     c.Duration("dynamodb-timeout"),
		}, nil
	},
	FromHello: func(raw json.RawMessage) (backendSettings, error) {
		s := &dynamodbSettings{}
		return s, unmarshalSettings(raw, s)
	},
}

// dynamodbSettings are the DynamoDB options; the guard (leaderrun itself)
// gets them all, and the AWS variables with its environment.
type dynamodbSettings struct {
	Table       string        `json:"table,omitempty"`
	CreateTable bool          `json:"create_table,omitempty"`
	Region      string        `json:"region,omitempty"`
	Endpoint    string        `json:"endpoint,omitempty"`
	Timeout     time.Duration `json:"timeout,omitempty"`
}

func (s *dynamodbSettings) New(opts locker.Options, readOnly bool, log hclog.Logger) (locker.Locker, error) {
	l, err := dynamodb.New(dynamodb.Config{
		Options:     opts,
		Table:       s.Table,
		CreateTable: s.CreateTable && !readOnly,
		Region:      s.Region,
		Endpoint:    s.Endpoint,
		Timeout:     s.Timeout,
		ReadOnly:    readOnly,
		Logger:      log.Named("dynamodb"),
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// ChildEnv names the table, region and endpoint; credentials reach the
// child only as the environment already carries them.
func (s *dynamodbSettings) ChildEnv() []envVar {
	v := set(nil, "LEADERRUN_DYNAMODB_TABLE", s.Table)
	v = set(v, "LEADERRUN_DYNAMODB_REGION", s.Region)
	return set(v, "LEADERRUN_DYNAMODB_ENDPOINT", s.Endpoint)
}

func (s *dynamodbSettings) Target(lk locker.Locker) (string, time.Duration) {
	return targetOf(lk)
}

// Guard: leaderrun-guard has no AWS client (SigV4 signing, the credential
// chain), and one would double its size; leaderrun itself is the guard
// (DESIGN §1.9).
func (s *dynamodbSettings) Guard(locker.Locker) (any, string) {
	return s, "leaderrun-guard has no DynamoDB client"
}

func (s *dynamodbSettings) Scope() string { return "" }
