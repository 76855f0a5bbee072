//go:build linux

package cmdline

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/leaderrun/leaderrun/guard"
	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// TestGuardReleasesPostgresRow: the guard is leaderrun itself, and its
// release from the hello alone frees the row the run held.
func TestGuardReleasesPostgresRow(t *testing.T) {
	pg := testcluster.StartPostgres(t)
	s := &postgresSettings{DSN: pg.DSN(), Schema: "public", Table: "leaderrun_leases", ConnectTimeout: 2 * time.Second}
	opts := locker.Options{Key: "guarded", Prefix: "leaderrun", ID: "a", TTL: 5 * time.Second}
	lk, err := s.New(opts, false, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	ls := lockertest.MustAcquire(t, lk)
	settings, whyFull := s.Guard(lk)
	if whyFull == "" {
		t.Fatal("the small guard is said to release a PostgreSQL row by itself")
	}
	raw, err := json.Marshal(settings)
	if err != nil {
		t.Fatal(err)
	}
	hello, err := json.Marshal(guard.BackendHello{Backend: "postgres", Options: opts, Settings: raw})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := releaseFromHello(ctx, hello, ls.Handle()); err != nil {
		t.Fatalf("release from the hello: %v", err)
	}
	if h, err := lk.Leader(ctx); !errors.Is(err, locker.ErrNoLeader) {
		t.Fatalf("after the guard's release the row is held by %+v (%v)", h, err)
	}
	// A second release (the lease is gone) is no error.
	if err := releaseFromHello(ctx, hello, ls.Handle()); err != nil {
		t.Fatalf("second release: %v", err)
	}
}

// TestDSNWithoutSecrets: the DSN the child sees has no password, client
// key passphrase or OAuth client secret left, in URL or keyword form, and
// everything else as it was written.
func TestDSNWithoutSecrets(t *testing.T) {
	for in, want := range map[string]string{
		"": "",
		"host=db1 user=lr password=s3cret dbname=app":           "host=db1 user=lr dbname=app",
		"password='a b\\' c' host=db1":                          "host=db1",
		"postgres://lr:s3cret@db1:5432/app?sslmode=verify-full": "postgres://lr@db1:5432/app?sslmode=verify-full",
		"postgresql://db1/app?password=s3cret&sslmode=require":  "postgresql://db1/app?sslmode=require",
		// The client key's passphrase and an OAuth client's secret.
		"host=db1 sslkey=/k.pem sslpassword=k3yPass sslmode=verify-full":                 "host=db1 sslkey=/k.pem sslmode=verify-full",
		"postgres://lr@db1/app?sslkey=%2Fk.pem&sslpassword=k3yPass":                      "postgres://lr@db1/app?sslkey=%2Fk.pem",
		"host=db1 oauth_client_id=lr oauth_client_secret=0authS":                         "host=db1 oauth_client_id=lr",
		"postgresql://db1/app?oauth_client_secret=0authS&oauth_client_id=lr":             "postgresql://db1/app?oauth_client_id=lr",
		"postgres://db1/app?sslpassword=a&password=b&sslpassword=c&application_name=job": "postgres://db1/app?application_name=job",
		// Spaces around '=', an escaped space in a bare value, quoted
		// values that keep their runs of spaces.
		"host = db1 password = s3\\ cret  application_name='two  words'": "host = db1 application_name='two  words'",
		"sslpassword='it''s' host=db1":                                   "",
		"PASSWORD=s3cret host=db1":                                       "host=db1",
		// A query pair that cannot be read goes, whatever it was.
		"postgres://db1/app?password=%zzs3cret&sslmode=require": "postgres://db1/app?sslmode=require",
		// Text libpq would refuse: nothing rather than a secret.
		"host=db1 password='s3cret": "",
		"host=db1 s3cret":           "",
	} {
		if got := dsnWithoutSecrets(in); got != want {
			t.Errorf("dsnWithoutSecrets(%q) = %q, want %q", in, got, want)
		}
	}
}

// A DSN of secrets alone, inherited as LEADERRUN_PG_DSN, is taken out of
// the child's environment rather than passed on whole.
func TestChildEnvDropsADSNOfSecretsAlone(t *testing.T) {
	t.Setenv("LEADERRUN_PG_DSN", "password=s3cret")
	cfg := &runConfig{backend: postgresBackend, settings: &postgresSettings{DSN: "password=s3cret"},
		opts: locker.Options{Key: "k", Prefix: "leaderrun", ID: "a"}}
	for _, kv := range childEnv(cfg) {
		if strings.Contains(kv, "s3cret") {
			t.Errorf("the child's environment has %s", kv)
		}
	}
}
