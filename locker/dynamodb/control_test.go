package dynamodb

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// readUnits counts GetItems, strong and not, and the read units the
// server says they consumed.
type readUnits struct {
	API
	mu             sync.Mutex
	strong, probes int
	units          float64
}

func (c *readUnits) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := c.API.GetItem(ctx, in, o...)
	c.mu.Lock()
	defer c.mu.Unlock()
	if aws.ToBool(in.ConsistentRead) {
		c.strong++
	} else {
		c.probes++
	}
	if err == nil && out.ConsumedCapacity != nil {
		c.units += aws.ToFloat64(out.ConsumedCapacity.CapacityUnits)
	}
	return out, err
}

func (c *readUnits) get() (strong, probes int, units float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.strong, c.probes, c.units
}

// TestControlWaitReadUnits: an idle WaitControl reads the record strongly
// once, then polls it every locker.ControlPoll with eventually consistent
// reads (half the read units); a write still reaches it within the poll.
func TestControlWaitReadUnits(t *testing.T) {
	d := testcluster.SharedDynalite(t)
	key := lockertest.Key(t)
	cnt := &readUnits{}
	l := newLocker(t, d.Endpoint(), key, func(c *Config) { c.wrap = func(a API) API { cnt.API = a; return cnt } })
	writer := newLocker(t, d.Endpoint(), key)
	if _, err := writer.SetControl(ctx(t), locker.Control{}); err != nil {
		t.Fatal(err)
	}
	const idle = 5 * time.Second
	wctx, cancel := context.WithTimeout(ctx(t), idle)
	defer cancel()
	if _, err := l.WaitControl(wctx, "1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitControl on an unchanged record: %v", err)
	}
	strong, probes, units := cnt.get()
	t.Logf("idle WaitControl for %s: %d strong reads, %d eventually consistent, %.1f read units (%.0f per minute)",
		idle, strong, probes, units, units*float64(time.Minute)/float64(idle))
	if strong > 1 || probes < 4 {
		t.Fatalf("an idle WaitControl made %d strong reads and %d eventually consistent ones in %s; want at most 1 strong", strong, probes, idle)
	}

	done := make(chan error, 1)
	go func() {
		c, err := l.WaitControl(ctx(t), "1")
		if err == nil && !c.Paused() {
			err = errors.New("WaitControl returned a record that does not pause")
		}
		done <- err
	}()
	time.Sleep(300 * time.Millisecond)
	wrote := time.Now()
	if _, err := writer.SetControl(ctx(t), locker.Control{Version: "1", Pause: &locker.Pause{By: "test", Reason: "units"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("a write reached WaitControl in %s", time.Since(wrote))
	case <-time.After(locker.ControlPoll + 2*time.Second):
		t.Fatal("WaitControl did not see the write within the poll")
	}
}
