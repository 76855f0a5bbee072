package e2e

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/jackc/pgx/v5"

	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// Hand edits of a PostgreSQL lease row that still hand the key to a
// second candidate while the holder's child runs (DESIGN §1.12, "Hand
// edits of a lease row"; contract §1.14: a record emptied by hand is a
// silent holder, not a free key). These tests fail on the code they were
// written against: each shows two children alive at once.

// pgVersion reads the version of key's lease row ("" when there is none).
func pgVersion(t *testing.T, pg *testcluster.Postgres, key string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var v string
	err = conn.QueryRow(ctx, `SELECT version FROM public.leaderrun_leases WHERE key = $1`, "leaderrun/"+key).Scan(&v)
	if err != nil && err != pgx.ErrNoRows {
		t.Fatal(err)
	}
	return v
}

// afterRenewal returns just after the holder of key renewed its row, so
// that its next renewal (and with it its discovery of an edit) is a whole
// renew interval away.
func afterRenewal(t *testing.T, pg *testcluster.Postgres, key string) {
	t.Helper()
	v := pgVersion(t, pg, key)
	waitFor(t, 60*time.Second, "a renewal of the row", func() bool { return pgVersion(t, pg, key) != v })
}

// handEditArgs: a TTL of 20s renewed every 10s, so a standby (reading
// every second) acts on an edit long before the holder's next renewal.
func handEditArgs(pg *testcluster.Postgres, key string) []string {
	return withTimings(pgArgs(pg.DSN(), key), "20s", "10s")
}

// noLateOverlap waits until b's child starts or a exits, fails if b's
// child started while a's was alive, and stops both.
func noLateOverlap(t *testing.T, a, b *host) {
	t.Helper()
	waitFor(t, 60*time.Second, "b's child to start or a to exit", func() bool { return b.started() || a.p.Exited() })
	if b.started() {
		b.noOverlap(t)
	}
	a.p.Signal(syscall.SIGTERM)
	a.p.Wait(20 * time.Second)
	b.p.Signal(syscall.SIGTERM)
	b.p.Wait(20 * time.Second)
}

// A row emptied by hand with its contract column changed too (an
// operator "clearing" the row: term, holder and contract set to empty strings) is
// read by a candidate that starts afterwards as a key freed after another
// tool's holder, and taken at once, though leader a's job runs on until
// a's next renewal fails. DESIGN promises a late candidate waits the
// larger of the row's TTL and its own on a row emptied without the mark.
func TestPostgresHandEditEmptiedContractLateCandidate(t *testing.T) {
	pg := testcluster.StartPostgres(t)
	key := newKey("handedit-contract")
	args := handEditArgs(pg, key)
	dir := t.TempDir()
	a := startHost(t, dir, "a", "b", args)
	a.waitStarted(t, 30*time.Second)
	afterRenewal(t, pg, key)
	pg.Exec(t, `UPDATE public.leaderrun_leases SET term = '', holder = '', contract = '' WHERE key = $1`, "leaderrun/"+key)
	b := startHost(t, dir, "b", "a", args)
	noLateOverlap(t, a, b)
}

// A standby that has seen live holder a is made to believe a term of
// another tool (no contract) took over: an operator writes a fake holder
// with a higher epoch over the row, then deletes the row. The standby
// reads the deletion as that other tool's release and takes the key at
// once, while a's child still runs: a learns of the edit only at its next
// renewal. DESIGN: a term written by hand is waited out with the TTL of
// the holder seen before; a row deleted after a live holder is that
// holder gone silent.
func TestPostgresHandEditFakeHolderThenDelete(t *testing.T) {
	pg := testcluster.StartPostgres(t)
	key := newKey("handedit-fake")
	args := handEditArgs(pg, key)
	dir := t.TempDir()
	a := startHost(t, dir, "a", "b", args)
	a.waitStarted(t, 30*time.Second)
	b := startHost(t, dir, "b", "a", args)
	waitFor(t, 20*time.Second, "b to campaign", func() bool { return strings.Contains(b.p.Output(), "waiting for the holder") })
	afterRenewal(t, pg, key)
	pg.Exec(t, `UPDATE public.leaderrun_leases SET term = 'manual', holder = 'ops', contract = '', epoch = epoch + 1, version = 'manual' WHERE key = $1`, "leaderrun/"+key)
	time.Sleep(3 * time.Second) // b reads the fake holder (it reads every second)
	pg.Exec(t, `DELETE FROM public.leaderrun_leases WHERE key = $1`, "leaderrun/"+key)
	noLateOverlap(t, a, b)
}

// A TTL lowered by hand, read by a candidate that starts after the edit
// (or by a standby restarted after it: it forgets what it saw). It sees
// the holder's term for the first time with the lowered TTL and counts
// with that alone, not with the larger of it and its own as it does on a
// row emptied or deleted, so it takes the key about 100ms + A after its
// first read while leader a's job runs on until a's next renewal.
func TestPostgresHandEditLowerTTLLateCandidate(t *testing.T) {
	pg := testcluster.StartPostgres(t)
	key := newKey("handedit-ttl")
	args := handEditArgs(pg, key)
	dir := t.TempDir()
	a := startHost(t, dir, "a", "b", args)
	a.waitStarted(t, 30*time.Second)
	afterRenewal(t, pg, key)
	pg.Exec(t, `UPDATE public.leaderrun_leases SET ttl_ms = 100 WHERE key = $1`, "leaderrun/"+key)
	b := startHost(t, dir, "b", "a", args)
	noLateOverlap(t, a, b)
}

// The DynamoDB form of TestPostgresHandEditEmptiedContractLateCandidate:
// an UpdateItem emptying term and holder and clearing contract, right
// after leader a's child started (a's next renewal is 10s away), then a
// candidate started after the edit takes the item at once.
func TestDynamoDBHandEditEmptiedContractLateCandidate(t *testing.T) {
	d := testcluster.StartDynalite(t)
	d.SetEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ac, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := dynamodb.NewFromConfig(ac, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(d.Endpoint()) })
	key := newKey("handedit-contract")
	args := withTimings(dynArgs(d.Endpoint(), key), "20s", "10s")
	dir := t.TempDir()
	a := startHost(t, dir, "a", "b", args)
	a.waitStarted(t, 30*time.Second)
	e := &types.AttributeValueMemberS{Value: ""}
	if _, err := c.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String("leaderrun"),
		Key:                       map[string]types.AttributeValue{"key": &types.AttributeValueMemberS{Value: "leaderrun/" + key}},
		UpdateExpression:          aws.String("SET term = :e, holder = :e, contract = :e"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":e": e}}); err != nil {
		t.Fatal(err)
	}
	b := startHost(t, dir, "b", "a", args)
	noLateOverlap(t, a, b)
}
