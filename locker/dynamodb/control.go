package dynamodb

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/leaserow"
)

// ReadControl reads the control item with a strongly consistent GetItem.
func (s *store) ReadControl(ctx context.Context) ([]byte, uint64, error) {
	v, it, err := s.control(ctx, "#rec, #v", true)
	return []byte(getS(it, attrRecord)), v, err
}

// control reads the attributes proj names of the control item, and its
// version; leaserow.ErrNoRow when there is none.
func (s *store) control(ctx context.Context, proj string, consistent bool) (uint64, map[string]types.AttributeValue, error) {
	it, err := s.get(ctx, "read the control item", s.controlKey, proj, consistent)
	if err != nil || len(it) == 0 {
		return 0, nil, cmp.Or(err, leaserow.ErrNoRow)
	}
	v, err := strconv.ParseUint(getN(it, attrVersion), 10, 64)
	if err != nil || v == 0 {
		return 0, nil, fmt.Errorf("dynamodb: %w: the control item %s has no positive version", locker.ErrRefused, s.controlKey)
	}
	return v, it, nil
}

// WriteControl sets the control item's record and version prev+1 in one
// UpdateItem conditioned on its version being prev, or on its absence
// when prev is 0. (A PutItem would do the same with one more IAM action.)
func (s *store) WriteControl(ctx context.Context, prev uint64, value []byte) error {
	if err := s.prepare(ctx); err != nil {
		if errors.Is(err, errNoTable) {
			return fmt.Errorf("dynamodb: %w: write the control item: no table %q at %s (--dynamodb-table)", locker.ErrRefused, s.table, s.addr)
		}
		return s.refusal(err)
	}
	vals := map[string]types.AttributeValue{":rec": str(string(value)), ":next": num(int64(prev + 1))}
	cond := "attribute_not_exists(#k)"
	if prev != 0 {
		cond = "#v = :prev"
		vals[":prev"] = num(int64(prev))
	}
	return s.updateItem(ctx, s.controlKey, "write the control item", "SET #rec = :rec, #v = :next", cond, vals)
}

// ProbeControl reads the control item's version with an eventually
// consistent GetItem, half the read units of ReadControl's: WaitControl
// polls with it once per renew interval (leaserow.Config.ControlPoll)
// and reads strongly only when it
// saw a change (leaserow.ControlProber). A stale answer costs a late
// step-down by the replication lag, or one strong read more, never a
// wrong answer: the record WaitControl returns comes from ReadControl.
func (s *store) ProbeControl(ctx context.Context) (uint64, error) {
	v, _, err := s.control(ctx, "#v", false)
	return v, err
}
