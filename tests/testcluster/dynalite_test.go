//go:build linux

package testcluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
