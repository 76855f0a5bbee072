//go:build linux

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/jackc/pgx/v5"

	"github.com/leaderrun/leaderrun/tests/fence"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// The hand edits an operator makes to "unstick" a key (DESIGN §1.14: each
// is a holder gone silent, never a free key).
const (
	// editDelete removes the holder's record: the election key, the
	// znode, the KV entry, the Lease, the row or item, the lock file.
	editDelete = "delete"
	// editFree empties the holder's record without a release.
	editFree = "free"
	// editLowerTTL lowers the TTL the holder declared.
	editLowerTTL = "lower-ttl"
	// editEpochDown sets the epoch the record keeps below its value.
	editEpochDown = "epoch-down"
)

// handEditor is a Cluster whose leaderrun records an operator can edit by
// hand.
type handEditor interface {
	// HandEdits lists the edits the backend's records allow.
	HandEdits() []string
	// HandEdit makes edit to the records of key under the default prefix.
	HandEdit(t testing.TB, key, edit string) error
}

// handEdit edits the leader's record by hand while its job takes its
// whole kill grace to stop (it ignores SIGTERM), then waits until another
// host leads or, for an edit the holder may ride out, two TTLs have
// passed. The world's checks do the rest: no standby's child may start
// while the old one still runs.
func handEdit(w *world, _ *host, in fence.Instance) outcome {
	ed, ok := w.cl.(handEditor)
	if !ok {
		w.t.Errorf("hand-edit: the %s cluster cannot edit its records", w.cl.Name())
		return outcome{at: fence.Now()}
	}
	edits := ed.HandEdits()
	edit := edits[w.rng.IntN(len(edits))]
	at := fence.Now()
	if err := ed.HandEdit(w.t, key, edit); err != nil {
		w.t.Errorf("hand-edit %s on %s: %v", edit, w.cl.Name(), err)
		return outcome{at: at, how: edit}
	}
	w.waitTakeover(in, at, 0, 2*w.tm.TTL+5*time.Second, false)
	return outcome{at: at, how: edit}
}

// HandEdits implements handEditor: an etcd lease cannot be edited by a
// key write, and the epoch is the key's create revision.
func (Etcd) HandEdits() []string { return []string{editDelete} }

// HandEdit implements handEditor with etcdctl: the holder's election key
// (the lowest create revision under /leaderrun/<key>/@) is deleted.
func (e Etcd) HandEdit(t testing.TB, key, edit string) error {
	if edit != editDelete {
		return fmt.Errorf("etcd: no edit %q", edit)
	}
	ctl := testcluster.Bin(t, "etcdctl")
	ep := strings.Join(e.Endpoints(), ",")
	out, err := exec.Command(ctl, "--endpoints", ep, "get", "--prefix", "/leaderrun/"+key+"/@",
		"--sort-by=CREATE", "--order=ASCEND", "--keys-only", "--limit=1").Output()
	if err != nil {
		return fmt.Errorf("etcdctl get: %w", err)
	}
	holder := strings.TrimSpace(string(out))
	if holder == "" {
		return fmt.Errorf("no election key under /leaderrun/%s/", key)
	}
	if b, err := exec.Command(ctl, "--endpoints", ep, "del", holder).CombinedOutput(); err != nil {
		return fmt.Errorf("etcdctl del %s: %v: %s", holder, err, b)
	}
	return nil
}

// HandEdits implements handEditor.
func (Consul) HandEdits() []string { return []string{editDelete, editFree} }

// HandEdit implements handEditor over the KV API: the lock key is deleted
// or its value emptied by a plain PUT (which keeps the session's lock).
func (c Consul) HandEdit(t testing.TB, key, edit string) error {
	url := "http://" + c.HTTPAddr(0) + "/v1/kv/leaderrun/" + key
	method, body := http.MethodDelete, ""
	if edit == editFree {
		method = http.MethodPut
	} else if edit != editDelete {
		return fmt.Errorf("consul: no edit %q", edit)
	}
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	if tok := c.ManagementToken(); tok != "" {
		req.Header.Set("X-Consul-Token", tok)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("consul %s %s: %s", method, url, resp.Status)
	}
	return nil
}

// HandEdits implements handEditor.
func (ZooKeeper) HandEdits() []string { return []string{editDelete, editFree} }

// HandEdit implements handEditor with a client of its own: the holder's
// znode (the lowest sequence under /leaderrun/<key>) is deleted, or its
// data emptied.
func (z ZooKeeper) HandEdit(t testing.TB, key, edit string) error {
	conn, _, err := zk.Connect(z.Addrs(), 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		return err
	}
	defer conn.Close()
	dir := "/leaderrun/" + key
	kids, _, err := conn.Children(dir)
	if err != nil {
		return fmt.Errorf("children of %s: %w", dir, err)
	}
	holder, low := "", int64(-1)
	for _, k := range kids {
		i := strings.LastIndexByte(k, '-')
		if !strings.HasPrefix(k, "@") || i < 0 {
			continue
		}
		seq, err := strconv.ParseInt(k[i+1:], 10, 64)
		if err == nil && (low < 0 || seq < low) {
			holder, low = k, seq
		}
	}
	if holder == "" {
		return fmt.Errorf("no candidate znode under %s", dir)
	}
	switch edit {
	case editDelete:
		return conn.Delete(dir+"/"+holder, -1)
	case editFree:
		_, err := conn.Set(dir+"/"+holder, nil, -1)
		return err
	}
	return fmt.Errorf("zookeeper: no edit %q", edit)
}

// HandEdits implements handEditor.
func (Kube) HandEdits() []string { return []string{editDelete, editFree, editLowerTTL} }

// HandEdit implements handEditor over the API: the key's Lease is deleted,
// its holderIdentity cleared, or its leaseDurationSeconds set to 1.
func (k Kube) HandEdit(t testing.TB, key, edit string) error {
	path := "/apis/coordination.k8s.io/v1/namespaces/default/leases/leaderrun." + key
	var code int
	var out []byte
	switch edit {
	case editDelete:
		code, out = k.Do(t, http.MethodDelete, path, nil)
	case editFree, editLowerTTL:
		code, out = k.Do(t, http.MethodGet, path, nil)
		if code != http.StatusOK {
			break
		}
		var lease map[string]any
		if err := json.Unmarshal(out, &lease); err != nil {
			return err
		}
		spec, _ := lease["spec"].(map[string]any)
		if spec == nil {
			return fmt.Errorf("lease %s has no spec", path)
		}
		if edit == editFree {
			delete(spec, "holderIdentity")
		} else {
			spec["leaseDurationSeconds"] = 1
		}
		b, err := json.Marshal(lease)
		if err != nil {
			return err
		}
		code, out = k.Do(t, http.MethodPut, path, b)
	default:
		return fmt.Errorf("kubernetes: no edit %q", edit)
	}
	if code != http.StatusOK {
		return fmt.Errorf("kubernetes %s %s: HTTP %d: %s", edit, path, code, out)
	}
	return nil
}

// rowEdits are the SQL of each hand edit of a lease row.
var rowEdits = map[string]string{
	editDelete:    `DELETE FROM leaderrun_leases WHERE key = $1`,
	editFree:      `UPDATE leaderrun_leases SET term = '', holder = '' WHERE key = $1`,
	editLowerTTL:  `UPDATE leaderrun_leases SET ttl_ms = 100 WHERE key = $1`,
	editEpochDown: `UPDATE leaderrun_leases SET epoch = 1 WHERE key = $1`,
}

// HandEdits implements handEditor.
func (Postgres) HandEdits() []string {
	return []string{editDelete, editFree, editLowerTTL, editEpochDown}
}

// HandEdit implements handEditor with plain SQL, as an operator types it,
// on the row of key under the default prefix.
func (p Postgres) HandEdit(t testing.TB, key, edit string) error {
	sql, ok := rowEdits[edit]
	if !ok {
		return fmt.Errorf("postgres: no edit %q", edit)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.DSN())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	tag, err := conn.Exec(ctx, sql, "leaderrun/"+key)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("postgres: %s changed %d rows, want 1", sql, tag.RowsAffected())
	}
	return nil
}

// HandEdits implements handEditor.
func (DynamoDB) HandEdits() []string {
	return []string{editDelete, editFree, editLowerTTL, editEpochDown}
}

// HandEdit implements handEditor with DeleteItem and UpdateItem calls on
// the default table.
func (d DynamoDB) HandEdit(t testing.TB, key, edit string) error {
	k := fmt.Sprintf(`{"key":{"S":%q}}`, "leaderrun/"+key)
	// The edit must find the item: an edit of nothing tests nothing.
	const held = `"ConditionExpression":"attribute_exists(#k)",`
	var op, body string
	switch edit {
	case editDelete:
		op, body = "DeleteItem", fmt.Sprintf(`{"TableName":"leaderrun","Key":%s,`+held+`"ExpressionAttributeNames":{"#k":"key"}}`, k)
	case editFree:
		op, body = "UpdateItem", fmt.Sprintf(`{"TableName":"leaderrun","Key":%s,"UpdateExpression":"SET #t = :e, #h = :e",`+
			held+`"ExpressionAttributeNames":{"#k":"key","#t":"term","#h":"holder"},"ExpressionAttributeValues":{":e":{"S":""}}}`, k)
	case editLowerTTL:
		op, body = "UpdateItem", fmt.Sprintf(`{"TableName":"leaderrun","Key":%s,"UpdateExpression":"SET #t = :v",`+
			held+`"ExpressionAttributeNames":{"#k":"key","#t":"ttl_ms"},"ExpressionAttributeValues":{":v":{"N":"100"}}}`, k)
	case editEpochDown:
		op, body = "UpdateItem", fmt.Sprintf(`{"TableName":"leaderrun","Key":%s,"UpdateExpression":"SET #e = :v",`+
			held+`"ExpressionAttributeNames":{"#k":"key","#e":"epoch"},"ExpressionAttributeValues":{":v":{"N":"1"}}}`, k)
	default:
		return fmt.Errorf("dynamodb: no edit %q", edit)
	}
	_, err := d.Call(op, body)
	return err
}

// HandEdits implements handEditor: the lock file removed (as `rm` of a
// "stale" lock), or every epoch counter of the key set back to 1.
func (Local) HandEdits() []string { return []string{editDelete, editEpochDown} }

// HandEdit implements handEditor on the shared lock directory, which is
// also the hosts' state directory.
func (l Local) HandEdit(t testing.TB, key, edit string) error {
	base := filepath.Join(l.dir, "leaderrun", key)
	switch edit {
	case editDelete:
		return os.Remove(base + ".lock")
	case editEpochDown:
		return os.WriteFile(base+".epoch", []byte("1\n"), 0o600)
	}
	return fmt.Errorf("local: no edit %q", edit)
}

var (
	_ handEditor = Etcd{}
	_ handEditor = Consul{}
	_ handEditor = ZooKeeper{}
	_ handEditor = Kube{}
	_ handEditor = Postgres{}
	_ handEditor = DynamoDB{}
	_ handEditor = Local{}
)
