//go:build linux

package scope

import (
	"context"
	"reflect"
	"testing"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// fakeBus records the call systemd would receive; no systemd runs as PID 1
// on the test machines, so only the request's shape is checked here.
type fakeBus struct {
	name, mode string
	props      []sddbus.Property
	result     string
}

func (b *fakeBus) StartTransientUnitContext(_ context.Context, name, mode string, props []sddbus.Property, ch chan<- string) (int, error) {
	b.name, b.mode, b.props = name, mode, props
	ch <- b.result
	return 1, nil
}

func TestStartAsksForADelegatedScopeWithOurPid(t *testing.T) {
	bus := &fakeBus{result: "done"}
	name, err := Start(context.Background(), bus, "billing/eu", 4242)
	if err != nil {
		t.Fatal(err)
	}
	if name != "leaderrun-billing_eu-4242.scope" || bus.name != name {
		t.Errorf("unit name %q (asked %q)", name, bus.name)
	}
	if bus.mode != "fail" {
		t.Errorf("mode %q, want fail", bus.mode)
	}
	want := map[string]dbus.Variant{
		"Description": dbus.MakeVariant("leaderrun --key billing/eu"),
		"PIDs":        dbus.MakeVariant([]uint32{4242}),
		"Delegate":    dbus.MakeVariant(true),
		"CollectMode": dbus.MakeVariant("inactive-or-failed"),
	}
	got := map[string]dbus.Variant{}
	for _, p := range bus.props {
		got[p.Name] = p.Value
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("properties %v, want %v", got, want)
	}
}

func TestStartFailsOnAFailedJob(t *testing.T) {
	if _, err := Start(context.Background(), &fakeBus{result: "failed"}, "k", 1); err == nil {
		t.Fatal("a failed scope job was taken for success")
	}
}
