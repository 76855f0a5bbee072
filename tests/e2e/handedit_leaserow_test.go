package e2e

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// Hand edits of a lease row (DESIGN §1.12): with leader a's child taking
// its whole kill grace to stop, an operator deletes the row, empties its
// term and holder, or lowers its TTL, the way plain SQL or a raw
// DynamoDB call does (the version left as it was). Standby b's child must
// not start before a's child is dead.

// slowHost is startHost with a child that takes most of its kill
// grace (1s) to stop after SIGTERM.
func slowHost(t *testing.T, dir, name, other string, args []string) *host {
	t.Helper()
	script := strings.Replace(hostScript(dir, name, other), "trap 'sleep 0.2;", "trap 'sleep 0.8;", 1)
	if script == hostScript(dir, name, other) {
		t.Fatal("hostScript no longer has the trap this test slows down")
	}
	args = append(append([]string{"--id", name}, args...), "--", "sh", "-c", script)
	return &host{name: name, dir: dir, p: start(t, name, nil, args...)}
}

// withTimings is a copy of args with --ttl and --renew-interval set to
// ttl and renew.
func withTimings(args []string, ttl, renew string) []string {
	args = append([]string(nil), args...)
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "--ttl":
			args[i+1] = ttl
		case "--renew-interval":
			args[i+1] = renew
		}
	}
	return args
}

// handEditRun starts leader a and standby b with args, makes the edit,
// and checks that b's child started after a's child ended, with a higher
// epoch, and that a lost its term (exit 123). The TTL is 6s and a renews
// every 3s, so that b (reading every 600ms) mostly sees the edit before
// a's next renewal does.
func handEditRun(t *testing.T, args []string, edit func(t *testing.T)) {
	args = withTimings(args, "6s", "3s")
	dir := t.TempDir()
	a := slowHost(t, dir, "a", "b", args)
	a.waitStarted(t, 30*time.Second)
	b := slowHost(t, dir, "b", "a", args)
	waitFor(t, 10*time.Second, "b to campaign", func() bool { return strings.Contains(b.p.Output(), "waiting for the holder") })
	time.Sleep(time.Second) // b has read the live row a few times
	edit(t)
	edited := time.Now()
	b.waitStarted(t, 40*time.Second)
	bStart := b.stamp(t, "start")
	b.noOverlap(t) // a's child was not alive when b's started
	if code := a.p.Wait(20 * time.Second); code != 123 {
		t.Errorf("a exit %d after the edit, want 123\n%s", code, a.p.Output())
	}
	// a exits once its child is gone; the child wrote its end unless the
	// kill grace ran out first on a loaded machine (SIGKILL).
	if _, err := os.Stat(a.file("end")); err == nil {
		aEnd := a.stamp(t, "end")
		t.Logf("edit -> a's child ended %v, b's child started %v", aEnd.Sub(edited).Round(time.Millisecond), bStart.Sub(edited).Round(time.Millisecond))
		if !bStart.After(aEnd) {
			t.Errorf("b's child started %v before a's child ended", aEnd.Sub(bStart).Round(time.Millisecond))
		}
	} else {
		t.Logf("edit -> a's child killed at the end of its kill grace, b's child started %v", bStart.Sub(edited).Round(time.Millisecond))
	}
	if eb, ea := b.epoch(t), a.epoch(t); eb <= ea {
		t.Errorf("b's epoch %d, want > a's %d", eb, ea)
	}
	b.p.Signal(syscall.SIGTERM)
	b.p.Wait(10 * time.Second)
}

func TestPostgresHandEdits(t *testing.T) {
	pg := testcluster.StartPostgres(t)
	for name, sql := range map[string]string{
		"delete":                `DELETE FROM public.leaderrun_leases WHERE key = $1`,
		"empty term and holder": `UPDATE public.leaderrun_leases SET term = '', holder = '' WHERE key = $1`,
		"lower ttl":             `UPDATE public.leaderrun_leases SET ttl_ms = 100 WHERE key = $1`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			key := newKey("handedit")
			handEditRun(t, pgArgs(pg.DSN(), key), func(t *testing.T) { pg.Exec(t, sql, "leaderrun/"+key) })
		})
	}
}

func TestDynamoDBHandEdits(t *testing.T) {
	d := testcluster.StartDynalite(t)
	d.SetEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ac, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := dynamodb.NewFromConfig(ac, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(d.Endpoint()) })
	item := func(key string) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{"key": &types.AttributeValueMemberS{Value: "leaderrun/" + key}}
	}
	update := func(t *testing.T, key, expr string, vals map[string]types.AttributeValue) {
		if _, err := c.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String("leaderrun"), Key: item(key),
			UpdateExpression: aws.String(expr), ExpressionAttributeValues: vals}); err != nil {
			t.Fatal(err)
		}
	}
	for name, edit := range map[string]func(t *testing.T, key string){
		"delete": func(t *testing.T, key string) {
			if _, err := c.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String("leaderrun"), Key: item(key)}); err != nil {
				t.Fatal(err)
			}
		},
		"empty term and holder": func(t *testing.T, key string) {
			update(t, key, "SET term = :e, holder = :e", map[string]types.AttributeValue{":e": &types.AttributeValueMemberS{Value: ""}})
		},
		"lower ttl": func(t *testing.T, key string) {
			update(t, key, "SET ttl_ms = :t", map[string]types.AttributeValue{":t": &types.AttributeValueMemberN{Value: "100"}})
		},
	} {
		t.Run(name, func(t *testing.T) {
			key := newKey("handedit")
			handEditRun(t, dynArgs(d.Endpoint(), key), func(t *testing.T) { edit(t, key) })
		})
	}
}
