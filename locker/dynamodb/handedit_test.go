package dynamodb

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/leaserow/rowtest"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// editItem makes a rowtest edit of the lease item at key (the full item
// key) with a raw client, the version left as it was.
func editItem(t *testing.T, c *dynamodb.Client, key, kind string) {
	t.Helper()
	var err error
	switch kind {
	case rowtest.Delete:
		_, err = c.DeleteItem(ctx(t), &dynamodb.DeleteItemInput{TableName: aws.String(DefaultTable), Key: keyOf(key)})
	case rowtest.Empty:
		_, err = c.UpdateItem(ctx(t), &dynamodb.UpdateItemInput{TableName: aws.String(DefaultTable), Key: keyOf(key),
			UpdateExpression: aws.String("SET #t = :e, #h = :e"), ExpressionAttributeNames: map[string]string{"#t": attrTerm, "#h": attrHolder},
			ExpressionAttributeValues: map[string]types.AttributeValue{":e": str("")}})
	case rowtest.LowerTTL:
		_, err = c.UpdateItem(ctx(t), &dynamodb.UpdateItemInput{TableName: aws.String(DefaultTable), Key: keyOf(key),
			UpdateExpression:          aws.String("SET ttl_ms = :t"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":t": num(100)}})
	case rowtest.ByHand:
		_, err = c.UpdateItem(ctx(t), &dynamodb.UpdateItemInput{TableName: aws.String(DefaultTable), Key: keyOf(key),
			UpdateExpression:          aws.String("SET ttl_ms = :t, version = :v"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":t": num(100), ":v": str("by-hand")}})
	default:
		t.Fatalf("no edit %q", kind)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestHandEdits: no hand edit of a held item lets a standby in before the
// holder's TTL (rowtest.HandEdits).
func TestHandEdits(t *testing.T) {
	d := testcluster.SharedDynalite(t)
	c := raw(t, d.Endpoint())
	rowtest.HandEdits(t, 2*time.Second, func(t *testing.T, key string, noWait bool) locker.Locker {
		return newLocker(t, d.Endpoint(), key, func(c *Config) { c.NoWait = noWait })
	}, func(t *testing.T, key, kind string) { editItem(t, c, "lrtest/"+key, kind) })
}

// TestStoreReleaseAndEdits: the lease-row stores' contract for hand
// edits (rowtest.StoreEdits); a deleted item's trace is the key's epoch
// counter, which the store keeps by itself.
func TestStoreReleaseAndEdits(t *testing.T) {
	d := testcluster.SharedDynalite(t)
	key := lockertest.Key(t)
	st := storeOf(t, d.Endpoint(), key)
	c := raw(t, d.Endpoint())
	item := key // storeOf's key has no prefix
	rowtest.StoreEdits(t, st,
		func(t *testing.T, field string) {
			attr, v := map[string]string{rowtest.FieldTTL: attrTTL, rowtest.FieldTerm: attrTerm, rowtest.FieldHolder: attrHolder,
				rowtest.FieldContract: attrContract}[field], types.AttributeValue(str(""))
			switch field {
			case rowtest.FieldTTL:
				v = num(100)
			case rowtest.FieldEpoch:
				attr, v = attrEpoch, num(1<<40)
			}
			if _, err := c.UpdateItem(ctx(t), &dynamodb.UpdateItemInput{TableName: aws.String(DefaultTable), Key: keyOf(item),
				UpdateExpression: aws.String("SET #a = :v"), ExpressionAttributeNames: map[string]string{"#a": attr},
				ExpressionAttributeValues: map[string]types.AttributeValue{":v": v}}); err != nil {
				t.Fatal(err)
			}
		},
		func(t *testing.T) { editItem(t, c, item, rowtest.Delete) },
		func(*testing.T, uint64) {})
}

// TestReleaseByHand: the release BACKENDS.md gives operators for a holder
// known to be gone frees the item as the holder's own release does (a
// single attempt takes it), and only at the epoch it names.
func TestReleaseByHand(t *testing.T) {
	d := testcluster.SharedDynalite(t)
	key := lockertest.Key(t)
	held := lockertest.MustAcquire(t, newLocker(t, d.Endpoint(), key))
	c := raw(t, d.Endpoint())
	byHand := func(epoch uint64) error {
		_, err := c.UpdateItem(ctx(t), &dynamodb.UpdateItemInput{TableName: aws.String(DefaultTable), Key: keyOf("lrtest/" + key),
			UpdateExpression:    aws.String("SET contract = :r, version = :v REMOVE term, holder"),
			ConditionExpression: aws.String("epoch = :e"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":r": str("released"), ":v": str("by-hand-1"),
				":e": num(int64(epoch))}})
		return err
	}
	var failed *types.ConditionalCheckFailedException
	if err := byHand(held.Epoch() + 1); !errors.As(err, &failed) {
		t.Fatalf("the release by hand at another epoch: %v, want a failed condition", err)
	}
	if err := byHand(held.Epoch()); err != nil {
		t.Fatal(err)
	}
	next := lockertest.MustAcquire(t, newLocker(t, d.Endpoint(), key, func(c *Config) { c.NoWait = true }))
	if next.Epoch() <= held.Epoch() {
		t.Fatalf("epoch %d after %d", next.Epoch(), held.Epoch())
	}
	// An item deleted already: the released item put back by hand.
	editItem(t, c, "lrtest/"+key, rowtest.Delete)
	if _, err := newLocker(t, d.Endpoint(), key, func(c *Config) { c.NoWait = true }).Acquire(ctx(t)); !errors.Is(err, locker.ErrHeld) {
		t.Fatalf("a single attempt on a deleted item: %v, want ErrHeld", err)
	}
	if _, err := c.PutItem(ctx(t), &dynamodb.PutItemInput{TableName: aws.String(DefaultTable), Item: map[string]types.AttributeValue{
		"key": str("lrtest/" + key), "contract": str("released"), "version": str("by-hand-2"), "epoch": num(0)}}); err != nil {
		t.Fatal(err)
	}
	last := lockertest.MustAcquire(t, newLocker(t, d.Endpoint(), key, func(c *Config) { c.NoWait = true }))
	if last.Epoch() <= next.Epoch() {
		t.Fatalf("epoch %d after %d", last.Epoch(), next.Epoch())
	}
}

// cancelAfterCounter cancels the caller's context the moment the epoch
// counter has been advanced: a claim given up between its two writes, as a
// --holders candidate gives up its other slots' claims when it wins one.
type cancelAfterCounter struct {
	API
	cancel func()
}

func (c *cancelAfterCounter) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := c.API.UpdateItem(ctx, in, o...)
	if strings.HasPrefix(aws.ToString(in.UpdateExpression), "ADD #epoch") {
		c.cancel()
	}
	return out, err
}

// TestClaimGivenUpLeavesNoTrace: a claim on a fresh key given up after the
// epoch counter moved leaves the key free for the next candidate at once,
// not a trace of a holder that never was (which every candidate would
// wait out for a whole TTL, as a hand-deleted item).
func TestClaimGivenUpLeavesNoTrace(t *testing.T) {
	d := testcluster.SharedDynalite(t)
	key := lockertest.Key(t)
	cctx, cancel := context.WithCancel(ctx(t))
	defer cancel()
	l := newLocker(t, d.Endpoint(), key, func(c *Config) {
		c.TTL = time.Minute
		c.wrap = func(a API) API { return &cancelAfterCounter{API: a, cancel: cancel} }
	})
	if ls, err := l.Acquire(cctx); !errors.Is(err, context.Canceled) {
		if ls != nil {
			lockertest.Release(ls)
		}
		t.Fatalf("Acquire cancelled after the counter moved: %v, want context.Canceled", err)
	}
	next := newLocker(t, d.Endpoint(), key, func(c *Config) { c.TTL = time.Minute; c.NoWait = true })
	ls, err := next.Acquire(ctx(t))
	if err != nil {
		t.Fatalf("the next candidate, at once: %v; want the key (no holder ever ran)", err)
	}
	lockertest.Release(ls)
}
