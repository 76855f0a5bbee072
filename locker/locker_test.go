package locker

import (
	"errors"
	"fmt"
	"testing"
)

func TestValidateKey(t *testing.T) {
	good := []string{"billing", "a", "team/job-1", "A.b_c-d", "0abc"}
	bad := []string{"", "-lead", ".hidden", "/abs", "a..b", "../etc", "a b", "a:b", "trailing/", "a//b", "é", string(make([]byte, 129))}
	long := ""
	for range 128 {
		long += "k"
	}
	good = append(good, long)
	bad = append(bad, long+"k")
	for _, k := range good {
		if err := ValidateKey(k); err != nil {
			t.Errorf("ValidateKey(%q) = %v, want ok", k, err)
		}
	}
	for _, k := range bad {
		if err := ValidateKey(k); err == nil {
			t.Errorf("ValidateKey(%q) accepted a bad key", k)
		}
	}
}

func TestHolderRecordRoundTrip(t *testing.T) {
	h := NewHolder(Options{ID: "host-a:42", Version: "v1"})
	h.Epoch = 9
	got := ParseHolder(h.Record())
	if got.ID != h.ID || got.Epoch != 9 || got.PID != h.PID || !got.AcquiredAt.Equal(h.AcquiredAt) || got.Version != "v1" {
		t.Fatalf("round trip: got %+v, want %+v", got, h)
	}
	if foreign := ParseHolder([]byte("someone else")); foreign.ID != "someone else" {
		t.Fatalf("a foreign value should surface as the ID, got %+v", foreign)
	}
}

func TestConfigErrorWrapsRefused(t *testing.T) {
	cause := errors.New("no such file")
	for _, tc := range []struct {
		name string
		err  *ConfigError
		want string
	}{
		{"rule only", &ConfigError{Field: "TTL", Rule: "must be at least 10s"}, "TTL: must be at least 10s"},
		{"with cause", &ConfigError{Field: "CAFile", Rule: "cannot be read", Err: cause}, "CAFile: cannot be read: no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := fmt.Errorf("consul: %w", tc.err)
			if !errors.Is(err, ErrRefused) {
				t.Fatal("a ConfigError must wrap ErrRefused")
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Field != tc.err.Field {
				t.Fatalf("errors.As did not find the field: %v", err)
			}
			if tc.err.Err != nil && !errors.Is(err, cause) {
				t.Fatal("the cause is not reachable through errors.Is")
			}
			if got := tc.err.Error(); got != tc.want {
				t.Fatalf("Error() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestLostSignal(t *testing.T) {
	var s LostSignal
	select {
	case <-s.Lost():
		t.Fatal("a new LostSignal is closed")
	default:
	}
	if s.LostReason() != "" {
		t.Fatalf("reason %q before Mark", s.LostReason())
	}
	if !s.Mark("key deleted") {
		t.Fatal("the first Mark reports it did nothing")
	}
	if s.Mark("session expired") {
		t.Fatal("a second Mark reports it closed Lost")
	}
	<-s.Lost()
	if got := s.LostReason(); got != "key deleted" {
		t.Fatalf("reason %q, want the first one", got)
	}
}

func TestSlotKey(t *testing.T) {
	if SlotKey("billing", 0) != "billing" || SlotKey("a/b", 3) != "a/b~3" {
		t.Fatalf("SlotKey: %q %q", SlotKey("billing", 0), SlotKey("a/b", 3))
	}
	for s := range MaxHolders {
		k, got, ok := SplitSlotKey(SlotKey("a/b", s))
		if !ok || k != "a/b" || got != s || ValidateKey(SlotKey("a/b", s)) != nil {
			t.Fatalf("slot %d: %q %d %v", s, k, got, ok)
		}
	}
	for _, bad := range []string{"a~0", "a~01", "a~64", "a~", "~1", "a~1~2", "a~-1", "a~x"} {
		if ValidateKey(bad) == nil {
			t.Errorf("ValidateKey(%q) accepted a name no slot has", bad)
		}
	}
	if ValidateUserKey("a~1") == nil || ValidatePrefix("p~1") == nil {
		t.Error("a slot key was accepted as a user key or prefix")
	}
}

func TestOptionsName(t *testing.T) {
	for s := range MaxHolders {
		o := Options{Key: "a/b", Slot: s}
		if o.Name() != SlotKey("a/b", s) || o.ValidateName() != nil {
			t.Fatalf("slot %d: Name %q, ValidateName %v", s, o.Name(), o.ValidateName())
		}
	}
	for _, bad := range []Options{{Key: "a~2"}, {Key: "a", Slot: -1}, {Key: "a", Slot: MaxHolders}, {Key: ""}, {Key: "a..b", Slot: 1}} {
		if bad.ValidateName() == nil {
			t.Errorf("ValidateName accepted key %q slot %d", bad.Key, bad.Slot)
		}
	}
	var ce *ConfigError
	if err := CheckKey(Options{Key: "a", Slot: 1, Prefix: "p~1"}); !errors.As(err, &ce) || ce.Field != "Prefix" {
		t.Errorf("CheckKey of a bad prefix: %v", err)
	}
	if err := CheckKey(Options{Key: "a", Slot: MaxHolders}); !errors.As(err, &ce) || ce.Field != "Key" {
		t.Errorf("CheckKey of a bad slot: %v", err)
	}
}
