// Package dynamodb keeps leadership in an item of a DynamoDB table: the
// lease-row core (package leaserow) on a Store of conditional writes,
// through aws-sdk-go-v2.
//
// # The table
//
// One table (Config.Table), partition key "key" of type String, no sort
// key. Each leaderrun key has two items, three once it has a history, four
// once it has a control record:
//
//   - the lease item, key = PREFIX/KEY: term, holder (the holder record,
//     JSON), contract, ttl_ms, epoch, version, renewed_at, and runs (a map
//     from slot to the once-per run record, JSON);
//   - the epoch counter, key = PREFIX/KEY#epoch ('#' is in no leaderrun
//     key): epoch, a number only ever advanced;
//   - the history item, key = PREFIX/KEY#history, written once the key
//     has a history (locker.History): terms, a map from
//     locker.TermName(epoch) to the term's record (JSON), the newest
//     --history-keep. The table has no sort key, so records of their own
//     could only be listed by a Scan; one item is read with one
//     consistent GetItem and needs no IAM action beyond the lease's;
//   - the control item, key = PREFIX/KEY#control, written once an operator
//     pauses the key or asks a term to step down (locker.Controls): record
//     (JSON) and version, a number every write advances. It is the key's,
//     shared by its slot keys (KEY~N reads PREFIX/KEY#control), and is
//     written by UpdateItem conditioned on the version read
//     (attribute_not_exists for the first), so it needs no IAM action
//     beyond the lease's either.
//
// # The writes
//
// Every read is GetItem with ConsistentRead. Every write of the lease
// item is one UpdateItem with a ConditionExpression on the item's version
// (attribute_not_exists for a create; the term for a run record, which is
// why run records live in the lease item: a condition sees one item
// only; a holder's renewal and release on every attribute it owns, so
// that a hand edit that leaves the version as it was still ends its
// term). An acquire first advances the counter (UpdateItem ADD, which
// returns the new value), then writes the lease item conditioned on the
// version it read before: an epoch taken after that read is greater than
// every epoch the counter gave before, in particular the one the item
// carried, and the counter outlives a lease item deleted by hand. A
// failed acquire only leaves a gap in the epochs. TransactWriteItems would
// make it one request, at twice the write units, and dynalite (the test
// server) does not implement it.
//
// # Retries
//
// The SDK's own retryer is off: a conditional write it repeated after a
// lost answer would meet its own first write as a conflict, which the
// core could not tell from a hand edit. This package retries only what
// DynamoDB refused before doing anything (throttling:
// ProvisionedThroughputExceededException, ThrottlingException,
// RequestLimitExceeded), with backoff, within the call's own context (a
// renewal's timeout); everything else goes back to the core, which
// retries at its own pace and reads back.
package dynamodb

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/hashicorp/go-hclog"

	"github.com/leaderrun/leaderrun/internal/retry"
	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/leaserow"
	"github.com/leaderrun/leaderrun/locker/records"
)

// Defaults of Config.
const (
	DefaultTable   = "leaderrun"
	DefaultTimeout = 5 * time.Second
)

// Config configures a Locker.
type Config struct {
	locker.Options
	// Table is the table's name (DefaultTable when empty).
	Table string
	// Endpoint overrides the DynamoDB endpoint URL; empty: the SDK's
	// (AWS_ENDPOINT_URL_DYNAMODB, AWS_ENDPOINT_URL, the profile's
	// endpoint_url, else the region's).
	Endpoint string
	// Region overrides the region; empty: AWS_REGION, the profile's.
	Region string
	// Profile names the shared-config profile; empty: AWS_PROFILE.
	Profile string
	// CreateTable creates the table (on-demand capacity) when it is
	// missing; otherwise a missing table is a configuration error.
	CreateTable bool
	// Timeout bounds a connection's set-up and every call outside a
	// renewal (DefaultTimeout when 0).
	Timeout time.Duration
	// ReadOnly (status, check) creates nothing: a missing table reads as
	// a key nobody holds.
	ReadOnly bool
	// Logger receives the Locker's logs; nil: none.
	Logger hclog.Logger

	// wrap, in tests, wraps the client (to count or fail requests).
	wrap func(API) API
}

// API is the part of the DynamoDB client the store uses.
type API interface {
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DescribeTable(context.Context, *dynamodb.DescribeTableInput, ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	CreateTable(context.Context, *dynamodb.CreateTableInput, ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
}

// New builds the Locker. It loads the AWS configuration (region,
// credentials, endpoint) and checks, within the timeout, that the table
// exists (creating it if allowed): a missing table, a missing region or
// credentials DynamoDB refuses are configuration errors at once; an
// endpoint it cannot reach is left to the first call, which retries.
func New(cfg Config) (*leaserow.Locker, error) {
	if err := locker.CheckKey(cfg.Options); err != nil {
		return nil, err
	}
	st, err := newStore(cfg)
	if err != nil {
		return nil, err
	}
	if err := st.probe(); err != nil {
		return nil, err
	}
	return leaserow.New(leaserow.Config{Options: cfg.Options, Store: st, Name: "dynamodb",
		Timeout: st.timeout, Logger: cfg.Logger})
}

// store is one key's items in the table. It implements leaserow.Store.
type store struct {
	api        API
	table      string
	key        string // the lease item's key
	counter    string // the epoch counter's key
	history    string // the history item's key
	controlKey string // the control item's key
	addr       string
	// regionName is the region, for error lines.
	regionName string
	timeout    time.Duration
	create     bool
	readOnly   bool
	log        hclog.Logger

	mu    sync.Mutex
	ready bool // the table is known to exist
}

var (
	_ leaserow.Store  = (*store)(nil)
	_ leaserow.Tracer = (*store)(nil)
)

func newStore(cfg Config) (*store, error) {
	if cfg.Table == "" {
		cfg.Table = DefaultTable
	}
	if !validTable(cfg.Table) {
		return nil, &locker.ConfigError{Field: "Table", Rule: fmt.Sprintf("%q is not a DynamoDB table name: 3 to 255 of A-Z a-z 0-9 _ - .", cfg.Table)}
	}
	if cfg.Endpoint != "" {
		if u, err := url.Parse(cfg.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, &locker.ConfigError{Field: "Endpoint", Rule: fmt.Sprintf("%q must be an http:// or https:// URL", cfg.Endpoint)}
		}
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	hc := awshttp.NewBuildableClient().WithDialerOptions(func(d *net.Dialer) { d.Timeout = timeout }).
		WithTransportOptions(func(t *http.Transport) { t.TLSHandshakeTimeout = timeout; t.ResponseHeaderTimeout = 0 })
	opts := []func(*config.LoadOptions) error{
		config.WithHTTPClient(hc),
		config.WithRetryer(func() aws.Retryer { return aws.NopRetryer{} }),
	}
	if cfg.Region != "" {
		opts = append(opts, config.WithRegion(cfg.Region))
	}
	if cfg.Profile != "" {
		opts = append(opts, config.WithSharedConfigProfile(cfg.Profile))
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ac, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, &locker.ConfigError{Field: "AWS", Rule: "cannot be loaded", Err: errors.New(oneLine(err.Error()))}
	}
	if ac.Region == "" {
		return nil, &locker.ConfigError{Field: "Region", Rule: "is not set: give it, or set AWS_REGION or a profile's region"}
	}
	client := dynamodb.NewFromConfig(ac, func(o *dynamodb.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
	})
	addr := endpointHost(client.Options())
	key := cfg.Name()
	if cfg.Prefix != "" {
		key = cfg.Prefix + "/" + cfg.Name()
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	var api API = client
	if cfg.wrap != nil {
		api = cfg.wrap(client)
	}
	ctlKey := cfg.Key
	if cfg.Prefix != "" {
		ctlKey = cfg.Prefix + "/" + ctlKey
	}
	return &store{api: api, table: cfg.Table, key: key, counter: key + "#epoch", history: key + "#history", controlKey: ctlKey + "#control",
		addr: addr, regionName: ac.Region,
		timeout: timeout, create: cfg.CreateTable, readOnly: cfg.ReadOnly, log: log}, nil
}

// endpointHost is the host the client talks to, for error lines.
func endpointHost(o dynamodb.Options) string {
	ep := aws.ToString(o.BaseEndpoint)
	if ep == "" {
		res, err := dynamodb.NewDefaultEndpointResolverV2().ResolveEndpoint(context.Background(),
			dynamodb.EndpointParameters{Region: aws.String(o.Region)})
		if err != nil {
			return "dynamodb." + o.Region
		}
		return res.URI.Host
	}
	if u, err := url.Parse(ep); err == nil && u.Host != "" {
		return u.Host
	}
	return ep
}

func validTable(s string) bool {
	if len(s) < 3 || len(s) > 255 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

// probe checks the table once; see New.
func (s *store) probe() error {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	err := s.prepare(ctx)
	if err == nil || (s.readOnly && errors.Is(err, errNoTable)) {
		return nil
	}
	var ce *locker.ConfigError
	if errors.As(err, &ce) {
		return ce
	}
	if credentialsError(err) {
		return &locker.ConfigError{Field: "AWS", Rule: "gives no usable credentials (variables, AWS_PROFILE, SSO, web identity, container or instance role)", Err: errors.New(oneLine(err.Error()))}
	}
	if errors.Is(err, locker.ErrRefused) {
		return &locker.ConfigError{Field: "AWS", Rule: "is refused by DynamoDB (credentials, region or permissions)", Err: errors.New(oneLine(err.Error()))}
	}
	s.log.Debug("cannot reach DynamoDB yet", "endpoint", s.addr, "error", oneLine(err.Error()))
	return nil
}

// errNoTable marks prepare's answer for a missing table.
var errNoTable = errors.New("no such table")

// prepare makes sure the table exists, once: DescribeTable, and
// CreateTable when allowed.
func (s *store) prepare(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ready {
		return nil
	}
	err := s.call(ctx, func(ctx context.Context) error {
		_, err := s.api.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(s.table)})
		return err
	})
	switch {
	case err == nil:
		s.ready = true
		return nil
	case errorCode(err) != "ResourceNotFoundException":
		return s.classify("describe the table", err)
	case s.readOnly:
		return errNoTable
	case !s.create:
		return &locker.ConfigError{Field: "Table", Rule: fmt.Sprintf("names table %q, which does not exist in region %s at %s (create it, or allow --dynamodb-create-table)", s.table, s.region(), s.addr)}
	}
	if err := s.createTable(ctx); err != nil {
		return err
	}
	s.ready = true
	return nil
}

func (s *store) region() string {
	return s.regionName
}

// createTable creates the table with on-demand capacity and waits until
// it is ACTIVE. Another candidate creating it at the same time is fine.
func (s *store) createTable(ctx context.Context) error {
	err := s.call(ctx, func(ctx context.Context) error {
		_, err := s.api.CreateTable(ctx, &dynamodb.CreateTableInput{
			TableName:            aws.String(s.table),
			AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(attrKey), AttributeType: types.ScalarAttributeTypeS}},
			KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(attrKey), KeyType: types.KeyTypeHash}},
			BillingMode:          types.BillingModePayPerRequest,
		})
		return err
	})
	if err != nil && errorCode(err) != "ResourceInUseException" {
		return s.classify("create table "+s.table, err)
	}
	s.log.Info("created the lease table", "table", s.table)
	for {
		var out *dynamodb.DescribeTableOutput
		err := s.call(ctx, func(ctx context.Context) error {
			var err error
			out, err = s.api.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(s.table)})
			return err
		})
		if err == nil && out.Table != nil && out.Table.TableStatus == types.TableStatusActive {
			return nil
		}
		if err != nil && errorCode(err) != "ResourceNotFoundException" {
			return s.classify("wait for table "+s.table, err)
		}
		if !retry.Sleep(ctx, 200*time.Millisecond) {
			return fmt.Errorf("dynamodb: table %s not active yet: %w", s.table, ctx.Err())
		}
	}
}

// Target is the endpoint's host, and the timeout.
func (s *store) Target() (string, time.Duration) { return s.addr, s.timeout }

// Place names the key's item: its table, region and endpoint
// (leaserow.Placer).
func (s *store) Place() (string, []string) {
	return "item " + s.key + " of table " + s.table + " in " + s.regionName + " at " + s.addr, []string{"Table", "Region", "Endpoint"}
}

// Close frees nothing: the client keeps idle connections only.
func (s *store) Close() error { return nil }

// Attribute names.
const (
	attrKey       = "key"
	attrTerm      = "term"
	attrHolder    = "holder"
	attrContract  = "contract"
	attrTTL       = "ttl_ms"
	attrEpoch     = "epoch"
	attrVersion   = "version"
	attrRenewedAt = "renewed_at"
	attrRuns      = "runs"
	attrTerms     = "terms"
	attrRecord    = "record"
)

// names maps #name placeholders to the attributes (key is a reserved word).
var names = map[string]string{
	"#k": attrKey, "#term": attrTerm, "#holder": attrHolder, "#contract": attrContract, "#ttl": attrTTL,
	"#epoch": attrEpoch, "#v": attrVersion, "#at": attrRenewedAt, "#runs": attrRuns, "#terms": attrTerms,
	"#rec": attrRecord,
}

func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }
func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}
func keyOf(k string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrKey: str(k)}
}

// only keeps the placeholders expr uses (DynamoDB refuses unused ones).
func only(expr string) map[string]string {
	m := map[string]string{}
	for p, n := range names {
		if containsName(expr, p) {
			m[p] = n
		}
	}
	return m
}

// containsName reports whether expr uses placeholder p as a whole word.
func containsName(expr, p string) bool {
	for i := 0; ; {
		j := strings.Index(expr[i:], p)
		if j < 0 {
			return false
		}
		end := i + j + len(p)
		if end == len(expr) || !isNameChar(expr[end]) {
			return true
		}
		i = end
	}
}

func isNameChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}

// Read reads the lease item with a strongly consistent read.
func (s *store) Read(ctx context.Context) (leaserow.Row, error) {
	it, err := s.get(ctx, "read the lease item", s.key, "#term, #holder, #contract, #ttl, #epoch, #v, #at", true)
	if err != nil || len(it) == 0 {
		return leaserow.Row{}, cmp.Or(err, leaserow.ErrNoRow)
	}
	return decodeRow(it)
}

// get reads the attributes proj names of the item of key, with a
// strongly consistent read when consistent; nil when the item or the
// table does not exist.
func (s *store) get(ctx context.Context, what, key, proj string, consistent bool) (map[string]types.AttributeValue, error) {
	if err := s.prepare(ctx); err != nil {
		if errors.Is(err, errNoTable) {
			return nil, nil
		}
		return nil, s.refusal(err)
	}
	var out *dynamodb.GetItemOutput
	err := s.call(ctx, func(ctx context.Context) error {
		var err error
		out, err = s.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: keyOf(key),
			ConsistentRead: aws.Bool(consistent), ProjectionExpression: aws.String(proj), ExpressionAttributeNames: only(proj)})
		return err
	})
	if err != nil {
		return nil, s.classify(what, err)
	}
	return out.Item, nil
}

func decodeRow(it map[string]types.AttributeValue) (leaserow.Row, error) {
	var r leaserow.Row
	r.Term = getS(it, attrTerm)
	if h := getS(it, attrHolder); h != "" && r.Term != "" {
		r.Holder = locker.ParseHolder([]byte(h))
		r.HolderRecord = h
	}
	r.Contract = getS(it, attrContract)
	ttl, _ := strconv.ParseInt(getN(it, attrTTL), 10, 64)
	r.TTL = time.Duration(ttl) * time.Millisecond
	r.Epoch, _ = strconv.ParseUint(getN(it, attrEpoch), 10, 64)
	r.Version = getS(it, attrVersion)
	r.RenewedAt, _ = time.Parse(time.RFC3339Nano, getS(it, attrRenewedAt))
	return r, nil
}

func getS(it map[string]types.AttributeValue, name string) string {
	if v, ok := it[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func getN(it map[string]types.AttributeValue, name string) string {
	if v, ok := it[name].(*types.AttributeValueMemberN); ok {
		return v.Value
	}
	return "0"
}

// values are a row's values for the SET below.
func values(r leaserow.Row) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		":term": str(r.Term), ":holder": str(r.StoredHolder()), ":contract": str(r.Contract),
		":ttl": num(r.TTL.Milliseconds()), ":v": str(r.Version), ":at": str(r.RenewedAt.UTC().Format(time.RFC3339Nano)),
	}
}

const setRow = "SET #term = :term, #holder = :holder, #contract = :contract, #ttl = :ttl, #v = :v, #at = :at"

// update makes one conditional UpdateItem of the lease item.
func (s *store) update(ctx context.Context, what, expr, cond string, vals map[string]types.AttributeValue) error {
	return s.updateItem(ctx, s.key, what, expr, cond, vals)
}

// updateItem makes one conditional UpdateItem of the item at key.
func (s *store) updateItem(ctx context.Context, key, what, expr, cond string, vals map[string]types.AttributeValue) error {
	err := s.call(ctx, func(ctx context.Context) error {
		_, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(s.table), Key: keyOf(key),
			UpdateExpression: aws.String(expr), ConditionExpression: aws.String(cond),
			ExpressionAttributeNames: only(expr + " " + cond), ExpressionAttributeValues: vals})
		return err
	})
	return s.classify(what, err)
}

// nextEpoch advances the key's epoch counter and returns its new value.
func (s *store) nextEpoch(ctx context.Context) (uint64, error) {
	var out *dynamodb.UpdateItemOutput
	err := s.call(ctx, func(ctx context.Context) error {
		var err error
		out, err = s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(s.table), Key: keyOf(s.counter),
			UpdateExpression: aws.String("ADD #epoch :one"), ExpressionAttributeNames: only("#epoch"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":one": num(1)},
			ReturnValues:              types.ReturnValueUpdatedNew})
		return err
	})
	if err != nil {
		return 0, s.classify("advance the epoch counter", err)
	}
	e, err := strconv.ParseUint(getN(out.Attributes, attrEpoch), 10, 64)
	if err != nil || e == 0 {
		return 0, fmt.Errorf("dynamodb: %w: the epoch counter %s holds no positive number", locker.ErrRefused, s.counter)
	}
	return e, nil
}

// Create writes the lease item if the key has none, with the next epoch.
func (s *store) Create(ctx context.Context, r leaserow.Row) (uint64, error) {
	return s.write(ctx, "create the lease item", "attribute_not_exists(#k)", nil, r)
}

// Take replaces the lease item at version prev, with the next epoch.
func (s *store) Take(ctx context.Context, prev string, r leaserow.Row) (uint64, error) {
	return s.write(ctx, "take the lease item", "#v = :prev", str(prev), r)
}

func (s *store) write(ctx context.Context, what, cond string, prev types.AttributeValue, r leaserow.Row) (uint64, error) {
	if err := s.prepare(ctx); err != nil {
		return 0, s.refusal(err)
	}
	// Once the counter moves, the item is written even if the caller
	// gives up (a --holders candidate drops its other slots' claims when
	// it wins one): a counter advanced with no item written is a trace of
	// a holder that never ran, which every candidate would wait out for a
	// TTL (Traced). The caller withdraws a claim it no longer wants. Only
	// the deadline still bounds the two writes.
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(context.WithoutCancel(ctx), dl)
		defer cancel()
	} else {
		ctx = context.WithoutCancel(ctx)
	}
	epoch, err := s.nextEpoch(ctx)
	if err != nil {
		return 0, err
	}
	vals := values(r)
	vals[":epoch"] = num(int64(epoch))
	if prev != nil {
		vals[":prev"] = prev
	}
	vals[":empty"] = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}
	if err := s.update(ctx, what, setRow+", #epoch = :epoch, #runs = if_not_exists(#runs, :empty)", cond, vals); err != nil {
		return 0, err
	}
	return epoch, nil
}

// owned is the condition that the item still holds every attribute of a
// row a holder owns, on the values ownedValues adds.
const owned = "#v = :prev AND #term = :pterm AND #holder = :pholder AND #contract = :pcontract AND #ttl = :pttl AND #epoch = :pepoch"

// ownedValues adds prev's values for owned to vals: the holder as read,
// or as values encodes it for a row the core wrote.
func ownedValues(vals map[string]types.AttributeValue, prev leaserow.Row) map[string]types.AttributeValue {
	p := values(prev)
	if prev.HolderRecord != "" {
		p[":holder"] = str(prev.HolderRecord)
	}
	vals[":prev"], vals[":pterm"], vals[":pholder"], vals[":pcontract"], vals[":pttl"] = p[":v"], p[":term"], p[":holder"], p[":contract"], p[":ttl"]
	vals[":pepoch"] = num(int64(prev.Epoch))
	return vals
}

// Renew replaces the lease item if it is still prev, epoch unchanged.
func (s *store) Renew(ctx context.Context, prev leaserow.Row, r leaserow.Row) error {
	return s.update(ctx, "renew the lease item", setRow, owned, ownedValues(values(r), prev))
}

// Clear frees the lease item if it is still prev: term and holder
// removed, the contract set to leaserow.Released.
func (s *store) Clear(ctx context.Context, prev leaserow.Row, next string) error {
	return s.update(ctx, "release the lease item", "SET #v = :v, #at = :at, #contract = :released REMOVE #term, #holder", owned,
		ownedValues(map[string]types.AttributeValue{":v": str(next), ":at": str(time.Now().UTC().Format(time.RFC3339Nano)),
			":released": str(leaserow.Released)}, prev))
}

// Traced reports whether the key, which has no lease item, shows a trace
// of a holder: its epoch counter, which every acquire advances and no
// release removes (leaserow.Tracer).
func (s *store) Traced(ctx context.Context) (bool, error) {
	it, err := s.get(ctx, "read the epoch counter", s.counter, "#epoch", true)
	return len(it) > 0, err
}

// PutRun writes the record of run.Slot into the lease item's runs if term
// holds it, in the same conditional write; records of the key that
// expired are removed in a second write of the same kind, when there are
// any.
func (s *store) PutRun(ctx context.Context, term string, run locker.Run) error {
	if err := s.prepare(ctx); err != nil {
		return s.refusal(err)
	}
	vals := map[string]types.AttributeValue{":term": str(term), ":rec": str(string(run.Record()))}
	set := func(expr string, vals map[string]types.AttributeValue) (*dynamodb.UpdateItemOutput, error) {
		var out *dynamodb.UpdateItemOutput
		err := s.call(ctx, func(ctx context.Context) error {
			var err error
			out, err = s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(s.table), Key: keyOf(s.key),
				UpdateExpression: aws.String(expr), ConditionExpression: aws.String("#term = :term"),
				ExpressionAttributeNames:  mergeNames(only(expr+" #term"), map[string]string{"#slot": run.Slot}),
				ExpressionAttributeValues: vals, ReturnValues: types.ReturnValueAllNew})
			return err
		})
		return out, err
	}
	out, err := set("SET #runs.#slot = :rec", vals)
	if isMissingMap(err) {
		// Acquires create the map; an item edited by hand may lack it.
		out, err = set("SET #runs = :runs", map[string]types.AttributeValue{":term": vals[":term"],
			":runs": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{run.Slot: vals[":rec"]}}})
	}
	if err != nil {
		return s.classify("record the run", err)
	}
	s.dropExpired(ctx, term, out.Attributes, run.Slot)
	return nil
}

func mergeNames(a, b map[string]string) map[string]string {
	for k, v := range b {
		a[k] = v
	}
	return a
}

// isMissingMap reports whether err is DynamoDB's refusal to set an entry
// of a map attribute that does not exist yet.
func isMissingMap(err error) bool {
	return errorCode(err) == "ValidationException" && strings.Contains(err.Error(), "document path")
}

// dropExpired removes the expired records of item's runs, but keep,
// while term still holds the item. Best effort: a failure only leaves
// them for the next time.
func (s *store) dropExpired(ctx context.Context, term string, item map[string]types.AttributeValue, keep string) {
	m, ok := item[attrRuns].(*types.AttributeValueMemberM)
	if !ok {
		return
	}
	now := time.Now()
	var parts []string
	n := map[string]string{"#runs": attrRuns, "#term": attrTerm}
	for slot, v := range m.Value {
		sv, ok := v.(*types.AttributeValueMemberS)
		if slot == keep || !ok {
			continue
		}
		if r, err := locker.ParseRun([]byte(sv.Value)); err == nil && r.Live(now) {
			continue
		}
		p := "#s" + strconv.Itoa(len(parts))
		n[p] = slot
		parts = append(parts, "#runs."+p)
		if len(parts) == 50 {
			break
		}
	}
	if len(parts) == 0 {
		return
	}
	err := s.call(ctx, func(ctx context.Context) error {
		_, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(s.table), Key: keyOf(s.key),
			UpdateExpression: aws.String("REMOVE " + strings.Join(parts, ", ")), ConditionExpression: aws.String("#term = :term"),
			ExpressionAttributeNames: n, ExpressionAttributeValues: map[string]types.AttributeValue{":term": str(term)}})
		return err
	})
	if err != nil {
		s.log.Debug("dropping expired run records failed", "error", oneLine(err.Error()))
	}
}

// ListRuns reads the key's records.
func (s *store) ListRuns(ctx context.Context) ([]records.Entry, error) {
	it, err := s.get(ctx, "read the runs", s.key, "#runs", true)
	return entries(it, attrRuns), err
}

// entries are the records in the map attribute attr of item, by their
// names.
func entries(item map[string]types.AttributeValue, attr string) []records.Entry {
	m, _ := item[attr].(*types.AttributeValueMemberM)
	if m == nil {
		return nil
	}
	var es []records.Entry
	for n, v := range m.Value {
		if sv, ok := v.(*types.AttributeValueMemberS); ok {
			es = append(es, records.Entry{Name: n, Value: []byte(sv.Value)})
		}
	}
	return es
}

// PutTerm sets the record of term.Epoch in the history item (creating
// the item, or its map, with a write conditioned on its absence), then,
// when the item holds more than keep records, removes the oldest in one
// more write, unconditioned: only records beyond the newest keep go.
func (s *store) PutTerm(ctx context.Context, term locker.Term, keep int) error {
	if err := s.prepare(ctx); err != nil {
		return s.refusal(err)
	}
	rec := str(string(term.Record()))
	name := locker.TermName(term.Epoch)
	update := func(expr, cond string, n map[string]string, vals map[string]types.AttributeValue) (*dynamodb.UpdateItemOutput, error) {
		in := &dynamodb.UpdateItemInput{TableName: aws.String(s.table), Key: keyOf(s.history),
			UpdateExpression: aws.String(expr), ExpressionAttributeNames: n, ExpressionAttributeValues: vals,
			ReturnValues: types.ReturnValueAllNew}
		if cond != "" {
			in.ConditionExpression = aws.String(cond)
		}
		var out *dynamodb.UpdateItemOutput
		err := s.call(ctx, func(ctx context.Context) error {
			var err error
			out, err = s.api.UpdateItem(ctx, in)
			return err
		})
		return out, err
	}
	var out *dynamodb.UpdateItemOutput
	var err error
	for range 2 {
		out, err = update("SET #terms.#e = :rec", "", map[string]string{"#terms": attrTerms, "#e": name},
			map[string]types.AttributeValue{":rec": rec})
		if !isMissingMap(err) {
			break
		}
		// The first record of the key: create the map, unless another
		// writer just did (then set the entry again).
		out, err = update("SET #terms = :terms", "attribute_not_exists(#terms)", map[string]string{"#terms": attrTerms},
			map[string]types.AttributeValue{":terms": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{name: rec}}})
		if errorCode(err) != "ConditionalCheckFailedException" {
			break
		}
	}
	if err != nil {
		return s.classify("record the term", err)
	}
	m, _ := out.Attributes[attrTerms].(*types.AttributeValueMemberM)
	if m == nil || len(m.Value) <= keep {
		return nil
	}
	var all []locker.Term
	for n := range m.Value {
		if e, err := strconv.ParseUint(n, 10, 64); err == nil && n == locker.TermName(e) {
			all = append(all, locker.Term{Epoch: e})
		}
	}
	old := locker.Pruned(all, keep)
	for len(old) > 0 {
		chunk := old[:min(len(old), 50)]
		old = old[len(chunk):]
		n := map[string]string{"#terms": attrTerms}
		parts := make([]string, len(chunk))
		for i, e := range chunk {
			p := "#e" + strconv.Itoa(i)
			n[p] = locker.TermName(e)
			parts[i] = "#terms." + p
		}
		if _, err := update("REMOVE "+strings.Join(parts, ", "), "", n, nil); err != nil {
			return s.classify("prune the history", err)
		}
	}
	return nil
}

// ListTerms reads the history item with a strongly consistent read.
func (s *store) ListTerms(ctx context.Context) ([]records.Entry, error) {
	it, err := s.get(ctx, "read the history", s.history, "#terms", true)
	return entries(it, attrTerms), err
}

// throttled are the error codes of a request DynamoDB refused for its
// rate before doing anything: safe to send again.
var throttled = map[string]bool{
	"ProvisionedThroughputExceededException": true,
	"ThrottlingException":                    true,
	"RequestLimitExceeded":                   true,
}

// call runs fn, again after a throttling answer, with jittered backoff
// (25ms doubling to 1s), until ctx ends; then the last throttling error.
func (s *store) call(ctx context.Context, fn func(context.Context) error) error {
	wait := 25 * time.Millisecond
	for {
		err := fn(ctx)
		if err == nil || !throttled[errorCode(err)] {
			return err
		}
		d := wait/2 + rand.N(wait/2+1)
		s.log.Debug("throttled; retrying", "code", errorCode(err), "in", d)
		if !retry.Sleep(ctx, d) {
			return err
		}
		wait = min(2*wait, time.Second)
	}
}

// errorCode is the API error code of err, "" when it is none.
func errorCode(err error) string {
	var ae smithy.APIError
	if err != nil && errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// refusedCodes are the error codes retrying cannot fix.
var refusedCodes = map[string]string{
	"ResourceNotFoundException":           "no such table",
	"AccessDeniedException":               "access denied",
	"UnrecognizedClientException":         "credentials not recognised",
	"InvalidSignatureException":           "signature refused",
	"MissingAuthenticationTokenException": "no credentials",
	"IncompleteSignatureException":        "signature refused",
	"ValidationException":                 "request refused",
	"ExpiredTokenException":               "credentials expired",
}

// refusal passes on prepare's errors (a ConfigError becomes ErrRefused:
// the table went missing after New).
func (s *store) refusal(err error) error {
	var ce *locker.ConfigError
	if errors.As(err, &ce) {
		return fmt.Errorf("dynamodb: %w: %s", locker.ErrRefused, ce.Error())
	}
	return err
}

// classify turns a failed call into the Store's errors: ErrConflict for a
// condition that did not hold, ErrRefused for what retrying cannot fix,
// else an error worth retrying, all in one line.
func (s *store) classify(what string, err error) error {
	if err == nil {
		return nil
	}
	code := errorCode(err)
	msg := oneLine(err.Error())
	switch {
	case code == "ConditionalCheckFailedException":
		return fmt.Errorf("dynamodb: %s: %w", what, leaserow.ErrConflict)
	case code == "ResourceNotFoundException":
		return fmt.Errorf("dynamodb: %w: %s: no table %q at %s (--dynamodb-table)", locker.ErrRefused, what, s.table, s.addr)
	case refusedCodes[code] != "":
		return fmt.Errorf("dynamodb: %w: %s: %s: %s", locker.ErrRefused, what, refusedCodes[code], msg)
	case throttled[code]:
		return fmt.Errorf("dynamodb: %s: throttled until the call's time ran out: %s", what, msg)
	}
	return fmt.Errorf("dynamodb: %s at %s: %s", what, s.addr, msg)
}

// credentialsError reports whether err is the SDK failing to find or
// refresh credentials (no variables, profile or instance role).
func credentialsError(err error) bool {
	m := err.Error()
	return strings.Contains(m, "failed to retrieve credentials") || strings.Contains(m, "failed to refresh cached credentials") ||
		strings.Contains(m, "no EC2 IMDS role found")
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
