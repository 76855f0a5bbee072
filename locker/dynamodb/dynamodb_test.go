package dynamodb

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/hashicorp/go-hclog"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/leaserow"
	"github.com/leaderrun/leaderrun/locker/leaserow/rowtest"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/locker/observe"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

func ctx(t *testing.T) context.Context { return lockertest.Ctx(t, 20*time.Second) }

// raw is a plain client of the server, for looking at and editing items
// by hand.
func raw(t *testing.T, endpoint string) *dynamodb.Client {
	t.Helper()
	ac, err := config.LoadDefaultConfig(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	return dynamodb.NewFromConfig(ac, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(endpoint) })
}

func item(t *testing.T, c *dynamodb.Client, table, key string) map[string]types.AttributeValue {
	t.Helper()
	out, err := c.GetItem(ctx(t), &dynamodb.GetItemInput{TableName: aws.String(table), Key: keyOf(key), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

// server is the lease-row contract's view of the shared dynalite: raw
// reads and edits of the item; reading the item also checks that the
// epoch counter item agrees with it.
func server(t *testing.T) rowtest.Server {
	d := testcluster.SharedDynalite(t)
	c := raw(t, d.Endpoint())
	return rowtest.Server{
		Open: func(t *testing.T, key string, noWait bool) *leaserow.Locker {
			return newLocker(t, d.Endpoint(), key, func(c *Config) { c.NoWait = noWait })
		},
		Row: func(t *testing.T, key string) rowtest.Stored {
			it := item(t, c, DefaultTable, "lrtest/"+key)
			epoch, err1 := strconv.ParseUint(getN(it, attrEpoch), 10, 64)
			ttl, err2 := strconv.ParseInt(getN(it, attrTTL), 10, 64)
			if err1 != nil || err2 != nil {
				t.Fatalf("lease item: %v", it)
			}
			if cnt := item(t, c, DefaultTable, "lrtest/"+key+"#epoch"); getN(cnt, attrEpoch) != getN(it, attrEpoch) {
				t.Fatalf("epoch counter %v, lease item %v", cnt, it)
			}
			return rowtest.Stored{Version: getS(it, attrVersion), Epoch: epoch, Contract: getS(it, attrContract), TTL: time.Duration(ttl) * time.Millisecond}
		},
		Edit: func(t *testing.T, key, kind string) { editItem(t, c, "lrtest/"+key, kind) },
		Unreachable: func(t *testing.T, key string) *leaserow.Locker {
			return newLocker(t, "http://127.0.0.1:1", key, func(c *Config) { c.NoWait = true })
		},
		UnreachableAddr: "127.0.0.1:1",
	}
}

// TestLeaseRowContract: the lease-row backends' scenarios on dynalite
// (rowtest.ServerContract).
func TestLeaseRowContract(t *testing.T) {
	rowtest.ServerContract(t, server(t))
}

// TestLockContract: the core lock contract (lockertest.LockContract) on
// dynalite; the hand delete is a raw DeleteItem of the lease item.
func TestLockContract(t *testing.T) {
	lockertest.LockContract(t, server(t).Lock())
}

// storeOf builds the bare Store for key, for the conditional writes.
func storeOf(t *testing.T, endpoint, key string) *store {
	t.Helper()
	st, err := newStore(Config{Options: locker.Options{Key: key, TTL: time.Second}, Endpoint: endpoint, CreateTable: true, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestConditionalWrites: every write whose condition fails on the server
// is ErrConflict and changes nothing.
func TestConditionalWrites(t *testing.T) {
	d := testcluster.SharedDynalite(t)
	st := storeOf(t, d.Endpoint(), lockertest.Key(t))
	row := leaserow.Row{Term: "t1", Holder: locker.Holder{ID: "a"}, Contract: observe.Contract, TTL: time.Second, Version: "v1", RenewedAt: time.Now()}
	e1, err := st.Create(ctx(t), row)
	if err != nil {
		t.Fatal(err)
	}
	row2 := row
	row2.Term, row2.Version = "t2", "v2"
	if _, err := st.Create(ctx(t), row2); !errors.Is(err, leaserow.ErrConflict) {
		t.Fatalf("Create over an item: %v, want ErrConflict", err)
	}
	if _, err := st.Take(ctx(t), "not-v1", row2); !errors.Is(err, leaserow.ErrConflict) {
		t.Fatalf("Take at a wrong version: %v, want ErrConflict", err)
	}
	stale := row
	stale.Version = "not-v1"
	if err := st.Renew(ctx(t), stale, row2); !errors.Is(err, leaserow.ErrConflict) {
		t.Fatalf("Renew at a wrong version: %v, want ErrConflict", err)
	}
	if err := st.Clear(ctx(t), stale, "v3"); !errors.Is(err, leaserow.ErrConflict) {
		t.Fatalf("Clear at a wrong version: %v, want ErrConflict", err)
	}
	if err := st.PutRun(ctx(t), "t2", locker.NewRun(locker.Options{ID: "b"}, "s", locker.RunSucceeded, 1, time.Hour)); !errors.Is(err, leaserow.ErrConflict) {
		t.Fatalf("PutRun of another term: %v, want ErrConflict", err)
	}
	got, err := st.Read(ctx(t))
	if err != nil || got.Version != "v1" || got.Term != "t1" || got.Epoch != e1 || got.Holder.ID != "a" {
		t.Fatalf("after the failed writes: %+v, %v; want the created row", got, err)
	}
	if runs, err := st.ListRuns(ctx(t)); err != nil || len(runs) != 0 {
		t.Fatalf("ListRuns after a refused PutRun: %v, %v", runs, err)
	}
	// Take at the right version advances the epoch; Clear keeps it.
	e2, err := st.Take(ctx(t), "v1", row2)
	if err != nil || e2 <= e1 {
		t.Fatalf("Take = %d, %v; want an epoch above %d", e2, err, e1)
	}
	row2.Epoch = e2
	if err := st.Clear(ctx(t), row2, "v3"); err != nil {
		t.Fatal(err)
	}
	got, err = st.Read(ctx(t))
	if err != nil || got.Term != "" || got.Version != "v3" || got.Epoch != e2 || got.Contract != leaserow.Released {
		t.Fatalf("after Clear: %+v, %v", got, err)
	}
}

// TestStandbyClockRatesOnTheServer: a standby whose clock runs 5% fast or
// slow never takes a dynalite item over before the holder's TTL since its
// last renewal has passed in real time; one 30% fast does
// (lockertest.StandbyClockRates). The standby is the store New builds,
// under the core with the rate clock for its watch.
func TestStandbyClockRatesOnTheServer(t *testing.T) {
	d := testcluster.SharedDynalite(t)
	n := 0
	lockertest.StandbyClockRates(t, 2*time.Second, func(now func() time.Time) (locker.Locker, locker.Locker) {
		n++
		key := fmt.Sprintf("%s-%d", lockertest.Key(t), n)
		withClock := func(cfg Config) (*leaserow.Locker, error) {
			st, err := newStore(cfg)
			if err != nil {
				return nil, err
			}
			if err := st.probe(); err != nil {
				return nil, err
			}
			return leaserow.New(leaserow.Config{Options: cfg.Options, Store: st, Name: "dynamodb", Timeout: st.timeout, Logger: cfg.Logger, Now: now})
		}
		return newLocker(t, d.Endpoint(), key), lockertest.Open(t, withClock, lockerConfig(d.Endpoint(), key))
	})
}

// TestMissingTable: without CreateTable a missing table is a one-line
// ConfigError on Table at New; read-only (status) it is a key nobody
// holds; with CreateTable it is created and used.
func TestMissingTable(t *testing.T) {
	d := testcluster.SharedDynalite(t)
	table := "lr-missing-" + strings.ToLower(strings.ReplaceAll(lockertest.Key(t), "/", "-"))
	cfg := Config{Options: locker.Options{Key: "k", ID: "a", TTL: 2 * time.Second}, Table: table, Endpoint: d.Endpoint(), Timeout: 2 * time.Second}
	_, err := New(cfg)
	var ce *locker.ConfigError
	if !errors.As(err, &ce) || ce.Field != "Table" || !strings.Contains(err.Error(), table) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("New on a missing table: %v, want a one-line ConfigError on Table naming it", err)
	}
	t.Log(err)
	ro := cfg
	ro.ReadOnly = true
	l, err := New(ro)
	if err != nil {
		t.Fatalf("read-only New on a missing table: %v", err)
	}
	if _, err := l.Leader(ctx(t)); !errors.Is(err, locker.ErrNoLeader) {
		t.Fatalf("read-only Leader on a missing table: %v, want ErrNoLeader", err)
	}
	if _, err := l.LookupRun(ctx(t), "s"); !errors.Is(err, locker.ErrNoRun) {
		t.Fatalf("read-only LookupRun on a missing table: %v, want ErrNoRun", err)
	}
	l.Close()
	cr := cfg
	cr.CreateTable = true
	l, err = New(cr)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ls := lockertest.MustAcquire(t, l)
	lockertest.Release(ls)
	out, err := raw(t, d.Endpoint()).DescribeTable(ctx(t), &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil || len(out.Table.KeySchema) != 1 || aws.ToString(out.Table.KeySchema[0].AttributeName) != "key" {
		t.Fatalf("created table: %+v, %v", out, err)
	}
}

// fakeAPI answers UpdateItem with the errors in fails, in order, then
// with success; it counts the calls. For the retry logic only.
type fakeAPI struct {
	API
	mu    sync.Mutex
	fails []error
	calls int
}

func (f *fakeAPI) UpdateItem(ctx context.Context, _ *dynamodb.UpdateItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if len(f.fails) > 0 {
		err := f.fails[0]
		if len(f.fails) > 1 {
			f.fails = f.fails[1:]
		}
		if err != nil {
			return nil, err
		}
	}
	return &dynamodb.UpdateItemOutput{}, nil
}

func apiErr(code string) error { return &smithy.GenericAPIError{Code: code, Message: "test"} }

// TestThrottlingAndConflictsToldApart: throttling is retried with backoff
// within the call's context and then succeeds; throttling that outlasts
// the context is a retryable failure (not a conflict, not a refusal); a
// conditional check failure is ErrConflict at once, never retried.
func TestThrottlingAndConflictsToldApart(t *testing.T) {
	mk := func(fails ...error) (*store, *fakeAPI) {
		f := &fakeAPI{fails: fails}
		return &store{api: f, table: "t", key: "k", addr: "test", timeout: time.Second, ready: true, log: hclog.NewNullLogger()}, f
	}
	row := leaserow.Row{Term: "t", Version: "v2"}
	prev := leaserow.Row{Term: "t", Version: "v1"}
	st, f := mk(apiErr("ProvisionedThroughputExceededException"), apiErr("ThrottlingException"), apiErr("RequestLimitExceeded"), nil)
	if err := st.Renew(ctx(t), prev, row); err != nil || f.calls != 4 {
		t.Fatalf("Renew through three throttlings: %v after %d calls, want success after 4", err, f.calls)
	}
	st, f = mk(apiErr("ThrottlingException"))
	c, cancel := context.WithTimeout(ctx(t), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := st.Renew(c, prev, row)
	took := time.Since(start)
	if err == nil || errors.Is(err, leaserow.ErrConflict) || errors.Is(err, locker.ErrRefused) || !strings.Contains(err.Error(), "throttled") {
		t.Fatalf("Renew throttled for good: %v, want a retryable throttling error", err)
	}
	if took > 450*time.Millisecond || f.calls < 3 {
		t.Fatalf("throttled Renew took %v over %d calls; want several calls within its 300ms", took, f.calls)
	}
	st, f = mk(apiErr("ConditionalCheckFailedException"))
	if err := st.Renew(ctx(t), prev, row); !errors.Is(err, leaserow.ErrConflict) || f.calls != 1 {
		t.Fatalf("Renew on a failed condition: %v after %d calls, want ErrConflict after 1", err, f.calls)
	}
	st, _ = mk(apiErr("AccessDeniedException"))
	if err := st.Renew(ctx(t), prev, row); !errors.Is(err, locker.ErrRefused) {
		t.Fatalf("Renew denied: %v, want ErrRefused", err)
	}
}

// counting counts the requests of each kind a store sends, and the reads
// that were not strongly consistent (dynalite's reads always are, so only
// the request can show it).
type counting struct {
	API
	mu sync.Mutex
	n  map[string]int
}

func (c *counting) add(op string) {
	c.mu.Lock()
	c.n[op]++
	c.mu.Unlock()
}

func (c *counting) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	c.add("GetItem")
	if !aws.ToBool(in.ConsistentRead) {
		c.add("GetItem without ConsistentRead")
	}
	return c.API.GetItem(ctx, in, o...)
}

func (c *counting) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	c.add("UpdateItem")
	return c.API.UpdateItem(ctx, in, o...)
}

func (c *counting) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := map[string]int{}
	for k, v := range c.n {
		m[k] = v
	}
	return m
}

// TestLatencyAndRequests logs how long acquire and renew take on dynalite,
// and counts the requests of an acquire, a renewal and a standby's wait at
// the default TTL (15s: a read every second).
func TestLatencyAndRequests(t *testing.T) {
	d := testcluster.SharedDynalite(t)
	key := lockertest.Key(t)
	cnt := &counting{n: map[string]int{}}
	wrap := func(c *Config) { c.wrap = func(a API) API { cnt.API = a; return cnt } }
	l := newLocker(t, d.Endpoint(), key, wrap)
	acq, ren := lockertest.Cycles(t, l, 20, 10)
	n := cnt.snapshot()
	// Per cycle: acquire = 1 read + counter + write; 10 renewals; release.
	// The first acquire, finding no item, also reads the epoch counter: a
	// fresh key is taken at once, a deleted item waited out.
	if n["GetItem"] != 20+1 || n["UpdateItem"] != 20*(2+10+1) || n["GetItem without ConsistentRead"] != 0 {
		t.Errorf("requests for 20 acquire/10 renew/release cycles: %v; want 21 GetItem, 260 UpdateItem", n)
	}
	am, a99 := lockertest.Median(acq)
	rm, r99 := lockertest.Median(ren)
	t.Logf("acquire (read + counter + conditional write): median %v, p99 %v; renew: median %v, p99 %v", am, a99, rm, r99)

	// A standby waiting on a holder at TTL 15s.
	holder := lockertest.MustAcquire(t, newLocker(t, d.Endpoint(), key, func(c *Config) { c.TTL = 15 * time.Second }))
	defer lockertest.Release(holder)
	scnt := &counting{n: map[string]int{}}
	sb := newLocker(t, d.Endpoint(), key, func(c *Config) {
		c.TTL = 15 * time.Second
		c.wrap = func(a API) API { scnt.API = a; return scnt }
	})
	// It reads once per renew interval (TTL/3, 5s): at the start, then 5s
	// and 10s on.
	const window = 11 * time.Second
	wctx, cancel := context.WithTimeout(ctx(t), window)
	defer cancel()
	if _, err := sb.Acquire(wctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("standby: %v", err)
	}
	sn := scnt.snapshot()
	t.Logf("standby at TTL 15s for %v: %v (%.0f reads/hour)", window, sn, float64(sn["GetItem"])*float64(time.Hour/window))
	if sn["GetItem"] < 2 || sn["GetItem"] > 4 || sn["UpdateItem"] != 0 || sn["GetItem without ConsistentRead"] != 0 {
		t.Errorf("standby requests in %v at TTL 15s: %v; want about 3 reads (one per renew interval), no writes", window, sn)
	}
}

// loseAnswer is a proxy to the server that, when armed, forwards the next
// UpdateItem and answers it with a 500 instead of the server's answer: a
// write that happened, whose answer was lost.
type loseAnswer struct {
	target string
	mu     sync.Mutex
	armed  bool
	sent   int
}

func (p *loseAnswer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	req, _ := http.NewRequestWithContext(r.Context(), r.Method, p.target+r.URL.Path, bytes.NewReader(body))
	req.Header = r.Header.Clone()
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	p.mu.Lock()
	update := strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".UpdateItem")
	if update {
		p.sent++
	}
	lose := p.armed && update
	if lose {
		p.armed = false
	}
	p.mu.Unlock()
	if lose {
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, `{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"answer lost"}`)
		return
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(out)
}

func (p *loseAnswer) arm() (sent int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed = true
	return p.sent
}

func (p *loseAnswer) updates() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent
}

// TestLostAnswerIsNotResent: a renewal whose answer is lost is not sent
// again by the SDK (which would meet its own write as a conflict and end
// the leadership as a hand edit): it fails, retryably; the next renewal
// adopts the write, and the one after succeeds.
func TestLostAnswerIsNotResent(t *testing.T) {
	d := testcluster.SharedDynalite(t)
	px := &loseAnswer{target: d.Endpoint()}
	srv := httptest.NewServer(px)
	defer srv.Close()
	ls := lockertest.MustAcquire(t, newLocker(t, srv.URL, lockertest.Key(t)))
	before := px.arm()
	if _, err := ls.Renew(ctx(t)); err == nil || errors.Is(err, locker.ErrLost) {
		t.Fatalf("Renew whose answer was lost: %v, want a retryable error", err)
	}
	if n := px.updates() - before; n != 1 {
		t.Fatalf("the renewal was sent %d times, want once", n)
	}
	if _, err := ls.Renew(ctx(t)); err == nil || errors.Is(err, locker.ErrLost) {
		t.Fatalf("Renew meeting our own earlier write: %v, want a failed attempt, not a loss", err)
	}
	if _, err := ls.Renew(ctx(t)); err != nil {
		t.Fatalf("Renew after adopting: %v", err)
	}
}

// TestHistoryRequests counts what the history costs: a record is one
// UpdateItem, two when it prunes or makes the history item; reading it is one consistent GetItem;
// the lease item is not touched.
func TestHistoryRequests(t *testing.T) {
	d := testcluster.SharedDynalite(t)
	key := lockertest.Key(t)
	cnt := &counting{n: map[string]int{}}
	l := newLocker(t, d.Endpoint(), key, func(c *Config) { c.wrap = func(a API) API { cnt.API = a; return cnt } })
	exit := 0
	const keep = 30
	for e := uint64(1); e <= keep+1; e++ {
		start := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC).Add(time.Duration(e) * time.Hour)
		tm := locker.Term{Epoch: e, ID: "billing-worker-1", Hostname: "worker-1.example.internal", PID: 123456,
			Start: start, End: start.Add(59 * time.Minute), Ended: locker.TermExited, ExitCode: &exit,
			Slot: start.Format(time.RFC3339), SlotOutcome: locker.RunSucceeded, Period: time.Hour}
		before := cnt.snapshot()
		if err := l.RecordTerm(ctx(t), tm, keep); err != nil {
			t.Fatal(err)
		}
		want := 1
		switch {
		case e == 1:
			want = 2 // no history item yet: the entry's path is refused, then the item is made
		case e > keep:
			want = 2 // the write that finds keep+1 records prunes one
		}
		if got := cnt.snapshot()["UpdateItem"] - before["UpdateItem"]; got != want {
			t.Fatalf("record of epoch %d: %d UpdateItem, want %d", e, got, want)
		}
		if e == 1 {
			t.Logf("one term's record: %d bytes", len(tm.Record()))
		}
	}
	before := cnt.snapshot()
	terms, err := l.Terms(ctx(t), 0)
	if err != nil || len(terms) != keep || terms[0].Epoch != keep+1 || terms[keep-1].Epoch != 2 {
		t.Fatalf("Terms = %d terms (%v)", len(terms), err)
	}
	n := cnt.snapshot()
	if n["GetItem"]-before["GetItem"] != 1 || n["GetItem without ConsistentRead"] != 0 {
		t.Fatalf("Terms: %v, want one consistent GetItem", n)
	}
	size := 0
	for _, tm := range terms {
		size += len(tm.Record()) + len(locker.TermName(tm.Epoch))
	}
	t.Logf("history item with %d terms: about %d bytes, %d write units per record", keep, size, (size+1023)/1024)
	// The history item is not the lease item: the key was never led.
	var nu *locker.NeverUsedError
	if _, err := l.Leader(ctx(t)); !errors.As(err, &nu) {
		t.Fatalf("Leader of a key with only a history: %v, want NeverUsedError", err)
	}
}

// TestControlApart: the control item is the key's (KEY#control, also for
// a slot key) and changes nothing the lease item answers; a holder's
// priority survives the holder attribute.
func TestControlApart(t *testing.T) {
	d := testcluster.SharedDynalite(t)
	lockertest.ControlApart(t, func(t *testing.T, key string) locker.Locker {
		return newLocker(t, d.Endpoint(), key, func(c *Config) { c.Priority = 7 })
	}, 7)
	it := item(t, raw(t, d.Endpoint()), DefaultTable, "lrtest/"+lockertest.Key(t)+"#control")
	if getN(it, attrVersion) != "1" || !strings.Contains(getS(it, attrRecord), "database migration") {
		t.Fatalf("the control item: %v; want the record at version 1", it)
	}
}

// TestWaitControlReads counts what a WaitControl with no change costs: one
// eventually consistent GetItem per locker.ControlPoll (half a read unit),
// and no write.
func TestWaitControlReads(t *testing.T) {
	d := testcluster.SharedDynalite(t)
	cnt := &counting{n: map[string]int{}}
	l := newLocker(t, d.Endpoint(), lockertest.Key(t), func(c *Config) { c.wrap = func(a API) API { cnt.API = a; return cnt } })
	wctx, cancel := context.WithTimeout(ctx(t), 3500*time.Millisecond)
	defer cancel()
	if _, err := l.WaitControl(wctx, ""); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitControl with no record: %v, want the deadline", err)
	}
	n := cnt.snapshot()
	t.Logf("WaitControl with no change for 3.5s: %v (%.0f reads/minute)", n, float64(n["GetItem"])*60/3.5)
	if n["GetItem"] < 3 || n["GetItem"] > 5 || n["UpdateItem"] != 0 || n["GetItem without ConsistentRead"] != n["GetItem"] {
		t.Errorf("WaitControl for 3.5s: %v; want 4 eventually consistent reads, no writes", n)
	}
}
