//go:build linux

package testcluster

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestDynaliteStartsAndStops(t *testing.T) {
	d := StartDynalite(t)
	if err := d.ping(); err != nil {
		t.Fatalf("ListTables on a fresh server: %v", err)
	}
	d.Kill()
	if d.ping() == nil {
		t.Fatal("the server answers after Kill")
	}
}

// TestDynaliteOnDiskKeepsItsTablesAcrossRestart: a server killed with
// SIGKILL and restarted serves the item it had acknowledged; one in
// memory does not, which shows the check can fail.
func TestDynaliteOnDiskKeepsItsTablesAcrossRestart(t *testing.T) {
	for _, disk := range []bool{true, false} {
		d := startOwnDynalite(t, disk)
		if _, err := d.call("CreateTable", `{"TableName":"tbl","AttributeDefinitions":[{"AttributeName":"k","AttributeType":"S"}],`+
			`"KeySchema":[{"AttributeName":"k","KeyType":"HASH"}],"BillingMode":"PAY_PER_REQUEST"}`); err != nil {
			t.Fatal(err)
		}
		// The table becomes ACTIVE just after CreateTable answers.
		if err := poll(startTimeout, func() error {
			_, err := d.call("PutItem", `{"TableName":"tbl","Item":{"k":{"S":"x"},"v":{"S":"kept"}}}`)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		d.Kill()
		d.Restart(t)
		out, err := d.call("GetItem", `{"TableName":"tbl","Key":{"k":{"S":"x"}},"ConsistentRead":true}`)
		kept := err == nil && strings.Contains(string(out), "kept")
		t.Logf("on disk %v: after a restart: %s %v", disk, out, err)
		if kept != disk {
			t.Errorf("on disk %v: item kept across SIGKILL and restart = %v", disk, kept)
		}
	}
}

// TestDynaliteOutlivesAClientResetMidRequest: a client whose connection
// is reset while it sends a request body (a proxy refusing a host, a
// killed leaderrun) leaves the server serving. dynalite itself rethrows
// the request's error and dies of it; the harness keeps it up.
func TestDynaliteOutlivesAClientResetMidRequest(t *testing.T) {
	d := StartDynalite(t)
	c, err := net.Dial("tcp", d.Addr())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: %s\r\nContent-Type: application/x-amz-json-1.0\r\n"+
		"X-Amz-Target: DynamoDB_20120810.ListTables\r\nContent-Length: 100\r\n\r\n{", d.Addr())
	time.Sleep(100 * time.Millisecond)
	c.(*net.TCPConn).SetLinger(0) // close with a reset
	c.Close()
	time.Sleep(300 * time.Millisecond)
	if err := d.ping(); err != nil {
		t.Fatalf("the server does not answer after a client's reset: %v\n%s", err, d.proc.logTail())
	}
}

// TestDynaliteBinPrefersTheVariable: $LEADERRUN_DYNALITE, when it names a
// file, wins over bin/ and PATH.
func TestDynaliteBinPrefersTheVariable(t *testing.T) {
	p := filepath.Join(t.TempDir(), "dynalite")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(DynaliteEnv, p)
	if got, err := dynaliteBin(); err != nil || got != p {
		t.Fatalf("dynaliteBin = %q, %v; want %q", got, err, p)
	}
}
