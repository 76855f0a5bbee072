package zookeeper

import (
	"errors"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// TestReleaseRecord: every way a candidate gives its znode back names it
// in the key's release record, which is how a standby tells a release
// from a znode deleted by hand (silent.go).
func TestReleaseRecord(t *testing.T) {
	z := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 1})
	servers := z.Addrs()
	c := rawConn(t, servers, "")
	record := func(t *testing.T, l *Locker) string {
		t.Helper()
		data, _, err := c.Get(l.dir + "/" + releasedName)
		if err != nil {
			t.Fatalf("read the release record: %v", err)
		}
		return string(data)
	}

	t.Run("a release names the znode it deletes", func(t *testing.T) {
		l := newLocker(t, servers, lockertest.Key(t))
		held := lockertest.MustAcquire(t, l)
		node := held.(*lease).node
		if err := held.Release(lockertest.Ctx(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
		if got := record(t, l); got != path.Base(node) {
			t.Fatalf("release record %q, want %q", got, path.Base(node))
		}
		if ok, _, _ := c.Exists(node); ok {
			t.Fatalf("%s still exists after the release", node)
		}
	})

	t.Run("a znode deleted by hand is named once its holder releases", func(t *testing.T) {
		l := newLocker(t, servers, lockertest.Key(t))
		held := lockertest.MustAcquire(t, l)
		node := held.(*lease).node
		if err := c.Delete(node, -1); err != nil {
			t.Fatal(err)
		}
		if got := record(t, l); got == path.Base(node) {
			t.Fatalf("release record names %q before its holder released", got)
		}
		if err := held.Release(lockertest.Ctx(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
		if got := record(t, l); got != path.Base(node) {
			t.Fatalf("release record %q, want %q", got, path.Base(node))
		}
	})

	t.Run("a release record deleted by hand is made again", func(t *testing.T) {
		l := newLocker(t, servers, lockertest.Key(t))
		held := lockertest.MustAcquire(t, l)
		node := held.(*lease).node
		if err := c.Delete(l.dir+"/"+releasedName, -1); err != nil {
			t.Fatal(err)
		}
		if err := held.Release(lockertest.Ctx(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
		if got := record(t, l); got != path.Base(node) {
			t.Fatalf("release record %q, want %q", got, path.Base(node))
		}
	})

	t.Run("a candidate that gives up names its own znode", func(t *testing.T) {
		key := lockertest.Key(t)
		held := lockertest.MustAcquire(t, newLocker(t, servers, key))
		b := newLocker(t, servers, key, func(c *Config) { c.NoWait = true })
		if _, err := b.Acquire(lockertest.Ctx(t, 10*time.Second)); !errors.Is(err, locker.ErrHeld) {
			t.Fatalf("Acquire with NoWait while held = %v, want ErrHeld", err)
		}
		got := record(t, b)
		if !strings.HasPrefix(got, "@") || got == path.Base(held.(*lease).node) {
			t.Fatalf("release record %q, want the waiting candidate's znode", got)
		}
	})

	t.Run("a renewal writes the record again", func(t *testing.T) {
		l := newLocker(t, servers, lockertest.Key(t))
		held := lockertest.MustAcquire(t, l)
		node := held.(*lease).node
		_, before, err := c.Get(node)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := renew(held, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		data, after, err := c.Get(node)
		if err != nil {
			t.Fatal(err)
		}
		if after.Version <= before.Version {
			t.Fatalf("znode version %d after a renewal, want > %d", after.Version, before.Version)
		}
		if ttl, ok := declaredTTL(data); !ok || ttl != testTTL {
			t.Fatalf("record declares TTL %v (%v), want %v", ttl, ok, testTTL)
		}
	})
}

// TestSilence is the bookkeeping of predecessors gone silent.
func TestSilence(t *testing.T) {
	now := time.Now()
	var s silence
	if _, waiting := s.pending(now, ""); waiting {
		t.Fatal("an empty silence waits")
	}
	s.add(silentHolder{name: "@a", until: now.Add(2 * time.Second)})
	s.add(silentHolder{name: "@b", until: now.Add(time.Second)})
	if until, waiting := s.pending(now, ""); !waiting || !until.Equal(now.Add(2*time.Second)) {
		t.Fatalf("pending = %v, %v; want the later of the two", until, waiting)
	}
	if until, waiting := s.pending(now, "@a"); !waiting || !until.Equal(now.Add(time.Second)) {
		t.Fatalf("after @a's release: pending = %v, %v; want @b's", until, waiting)
	}
	if _, waiting := s.pending(now.Add(time.Second), ""); waiting {
		t.Fatal("still waiting once @b's time passed")
	}
	if _, ok := declaredTTL([]byte(`{"id":"old leaderrun"}`)); ok {
		t.Fatal("a record without a TTL declares one")
	}
	if _, ok := declaredTTL([]byte("edited")); ok {
		t.Fatal("a value that is no record declares a TTL")
	}
}
