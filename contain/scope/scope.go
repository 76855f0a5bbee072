//go:build linux

// Package scope asks systemd for a transient scope unit holding this
// process, delegated to it, as `systemd-run --scope` does. leaderrun uses it
// where systemd is PID 1 and leaderrun's own cgroup belongs to systemd (a
// cron job, a login shell): it must not write into a cgroup systemd owns,
// but may create job cgroups inside a scope delegated to it (DESIGN §1.4).
package scope

import (
	"context"
	"errors"
	"fmt"
	"strings"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// Bus is the one systemd manager call this package makes; *sddbus.Conn has
// it.
type Bus interface {
	StartTransientUnitContext(ctx context.Context, name, mode string, properties []sddbus.Property, ch chan<- string) (int, error)
}

// UnitName is the scope's name for key, unique per process.
func UnitName(key string, pid int) string {
	return fmt.Sprintf("leaderrun-%s-%d.scope", escape(key), pid)
}

// escape keeps a key's letters, digits, '.', '_' and '-'; anything else
// (a '/') becomes '_', as unit names allow.
func escape(key string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return '_'
	}, key)
}

// Properties are the scope's: this pid, delegated, collected even if it
// failed, with a description naming the key.
func Properties(key string, pid int) []sddbus.Property {
	return []sddbus.Property{
		sddbus.PropDescription("leaderrun --key " + key),
		sddbus.PropPids(uint32(pid)),
		{Name: "Delegate", Value: dbus.MakeVariant(true)},
		{Name: "CollectMode", Value: dbus.MakeVariant("inactive-or-failed")},
	}
}

// Start creates the scope and waits until systemd has moved pid into it.
func Start(ctx context.Context, bus Bus, key string, pid int) (string, error) {
	name := UnitName(key, pid)
	done := make(chan string, 1)
	if _, err := bus.StartTransientUnitContext(ctx, name, "fail", Properties(key, pid), done); err != nil {
		return "", fmt.Errorf("start transient scope %s: %w", name, err)
	}
	select {
	case result := <-done:
		if result != "done" {
			return "", fmt.Errorf("start transient scope %s: job %s", name, result)
		}
		return name, nil
	case <-ctx.Done():
		return "", errors.Join(fmt.Errorf("start transient scope %s", name), ctx.Err())
	}
}

// Connect opens the system manager's bus (the user's one when not root).
func Connect(ctx context.Context, root bool) (*sddbus.Conn, error) {
	if root {
		return sddbus.NewSystemConnectionContext(ctx)
	}
	return sddbus.NewUserConnectionContext(ctx)
}
