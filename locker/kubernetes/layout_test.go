package kubernetes

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
)

// The records lie where, and as, releases before package records kept
// them: the control record in the control annotation of the control
// Lease, the terms as one JSON array in the terms annotation of the
// history Lease, the runs as one JSON object by slot in the runs
// annotation of the leadership Lease. A place is "<Lease>|<annotation>"
// and, for an element of an array or object, "|<epoch or slot>".
func TestRecordsLayout(t *testing.T) {
	srv := startServer(t)
	raw := srv.newLocker(t, "raw-client").client
	lease := func(key string) string {
		name, err := LeaseName(DefaultPrefix, key)
		if err != nil {
			t.Fatal(err)
		}
		return name
	}
	split := func(place string) (name, ann, elem string) {
		parts := strings.SplitN(place+"|", "|", 4)
		return parts[0], parts[1], parts[2]
	}
	lockertest.LayoutContract(t, lockertest.Layout{
		NewLocker: func(t *testing.T, key string) locker.Locker { return srv.newLocker(t, key) },
		Control:   func(key string) string { return lease(key) + controlSuffix + "|" + annControl },
		Term: func(key string, epoch uint64) string {
			return lease(key) + historySuffix + "|" + annTerms + "|" + strconv.FormatUint(epoch, 10)
		},
		Run: func(key, slot string) string { return lease(key) + "|" + annRuns + "|" + slot },
		Put: func(t *testing.T, place string, value []byte) {
			name, ann, elem := split(place)
			ctx := lockertest.Ctx(t, 5*time.Second)
			cur, err := raw.Get(ctx, name, metav1.GetOptions{})
			create := err != nil
			if create {
				cur = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNamespace}}
			}
			if cur.Annotations == nil {
				cur.Annotations = map[string]string{}
			}
			switch ann {
			case annControl:
				cur.Annotations[ann] = string(value)
			case annTerms:
				var terms []json.RawMessage
				_ = json.Unmarshal([]byte(cur.Annotations[ann]), &terms)
				b, _ := json.Marshal(append([]json.RawMessage{value}, terms...))
				cur.Annotations[ann] = string(b)
			case annRuns:
				runs := map[string]json.RawMessage{}
				_ = json.Unmarshal([]byte(cur.Annotations[ann]), &runs)
				runs[elem] = value
				b, _ := json.Marshal(runs)
				cur.Annotations[ann] = string(b)
			}
			if create {
				_, err = raw.Create(ctx, cur, metav1.CreateOptions{})
			} else {
				_, err = raw.Update(ctx, cur, metav1.UpdateOptions{})
			}
			if err != nil {
				t.Fatal(err)
			}
		},
		Get: func(t *testing.T, place string) ([]byte, bool) {
			name, ann, elem := split(place)
			cur, err := raw.Get(lockertest.Ctx(t, 5*time.Second), name, metav1.GetOptions{})
			if err != nil {
				return nil, false
			}
			v, ok := cur.Annotations[ann]
			switch {
			case !ok:
				return nil, false
			case ann == annControl:
				return []byte(v), true
			case ann == annTerms:
				var terms []json.RawMessage
				if err := json.Unmarshal([]byte(v), &terms); err != nil {
					t.Fatalf("annotation %s of %s = %q: not a JSON array", ann, name, v)
				}
				for _, r := range terms {
					if tm, err := locker.ParseTerm(r); err == nil && strconv.FormatUint(tm.Epoch, 10) == elem {
						return r, true
					}
				}
			default:
				runs := map[string]json.RawMessage{}
				if err := json.Unmarshal([]byte(v), &runs); err != nil {
					t.Fatalf("annotation %s of %s = %q: not a JSON object", ann, name, v)
				}
				r, ok := runs[elem]
				return r, ok
			}
			return nil, false
		},
	})
}
