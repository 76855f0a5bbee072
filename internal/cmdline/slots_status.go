//go:build linux

package cmdline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/leaderrun/leaderrun/locker"
)

// slotFlag is check's --slot: the slot of a key run with --holders.
func slotFlag() cli.Flag {
	return &cli.IntFlag{Name: "slot", Category: catQuery, EnvVars: []string{"LEADER_SLOT"},
		Usage: "the slot `S` of a key run with --holders (LEADER_SLOT in the child); 0 is the key itself"}
}

// querySlot is the slot of the key a query reads: --slot, or 0 (the key
// itself).
func querySlot(c *cli.Context) (int, error) {
	if !c.IsSet("slot") {
		return 0, nil
	}
	s := c.Int("slot")
	if s < 0 || s >= locker.MaxHolders {
		return 0, fmt.Errorf("--slot must be from 0 to %d, got %d", locker.MaxHolders-1, s)
	}
	return s, nil
}

// slotsReport is `status --holders N`: each slot's holder and the free
// slots. Its JSON fields are stable like statusReport's.
type slotsReport struct {
	Key     string       `json:"key"`
	Backend string       `json:"backend"`
	Holders int          `json:"holders"`
	Slots   []slotReport `json:"slots"`
	// Free are the slots nobody holds.
	Free []int `json:"free"`
	// Paused, StepDown and StepDownVoid are the key's control record, as
	// in statusReport: one record for all the slots.
	Paused       *locker.Pause    `json:"paused,omitempty"`
	StepDown     *locker.StepDown `json:"step_down,omitempty"`
	StepDownVoid bool             `json:"step_down_void,omitempty"`
}

// slotReport is one slot: its holder, or null when free.
type slotReport struct {
	Slot   int           `json:"slot"`
	Leader *leaderReport `json:"leader"`
	// HolderHolders is the --holders its holder runs with, when it
	// differs from the N asked about.
	HolderHolders int `json:"holder_holders,omitempty"`
}

// statusSlots reads every slot of the key once, each within --timeout.
func statusSlots(c *cli.Context) error {
	n, err := readHolders(c)
	if err != nil {
		return usage(err)
	}
	key, err := queryKey(c)
	if err != nil {
		return usage(err)
	}
	opts, err := lockerOptions(c, key)
	if err != nil {
		return usage(err)
	}
	if c.Duration("timeout") <= 0 {
		return usage(fmt.Errorf("--timeout must be greater than 0, got %v", c.Duration("timeout")))
	}
	b, settings, err := readBackend(c, opts)
	if err != nil {
		return usage(err)
	}
	report := slotsReport{Key: key, Backend: b.Name, Holders: n}
	if report.Slots, report.Free, err = readSlots(c, settings.New, b, opts, n); err != nil {
		return usage(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.Duration("timeout"))
	defer cancel()
	if ctl, err := readControlRecord(ctx, settings.New, opts); err == nil {
		var sr statusReport
		sr.withControl(ctl, time.Now())
		report.Paused, report.StepDown, report.StepDownVoid = sr.Paused, sr.StepDown, sr.StepDownVoid
	}
	if c.Bool("json") {
		return writeJSON(os.Stdout, report)
	}
	return report.writeText(os.Stdout, time.Now())
}

// newLocker builds a read-only Locker of the backend for opts.
type newLocker func(locker.Options, bool, hclog.Logger) (locker.Locker, error)

// readSlots reads the holder of each of the n slots of opts.Key once,
// each within --timeout: the slots, and those nobody holds.
func readSlots(c *cli.Context, newLk newLocker, b *backend, opts locker.Options, n int) ([]slotReport, []int, error) {
	key := opts.Key
	slots, free := []slotReport{}, []int{}
	for s := range min(n, locker.MaxHolders) {
		o := opts
		o.Slot = s
		lk, err := newLk(o, true, newQuietLogger())
		if err != nil {
			return nil, nil, configError(b, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.Duration("timeout"))
		h, lerr := lk.Leader(ctx)
		cancel()
		lk.Close()
		r, err := newStatusReport(o.Name(), b.Name, h, lerr)
		if err != nil {
			return nil, nil, fmt.Errorf("status of slot %d of key %q: %w", s, key, err)
		}
		sr := slotReport{Slot: s, Leader: r.Leader}
		if r.Leader == nil {
			free = append(free, s)
		} else if max(h.Holders, 1) != n {
			sr.HolderHolders = max(h.Holders, 1)
		}
		slots = append(slots, sr)
	}
	return slots, free, nil
}

// readControlRecord reads the key's control record, where the backend keeps one.
func readControlRecord(ctx context.Context, newLk newLocker, opts locker.Options) (locker.Control, error) {
	lk, err := newLk(opts, true, newQuietLogger())
	if err != nil {
		return locker.Control{}, err
	}
	defer lk.Close()
	ctl, ok := locker.ControlsOf(lk)
	if !ok {
		return locker.Control{}, errors.New("no control record")
	}
	return ctl.Control(ctx)
}

// writeText prints one row per slot for people.
func (r slotsReport) writeText(w io.Writer, now time.Time) error {
	fmt.Fprintf(w, "key %s, backend %s, %d holders\n", printable(r.Key), r.Backend, r.Holders)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SLOT\tHOLDER\tHOST\tPID\tEPOCH\tLEASE LEFT")
	for _, s := range r.Slots {
		l := s.Leader
		if l == nil {
			fmt.Fprintf(tw, "%d\tfree\t\t\t\t\n", s.Slot)
			continue
		}
		left := "unknown"
		if b := backendNamed(r.Backend); b != nil && b.NoExpiry != "" {
			left = "no expiry"
		}
		if l.LeaseRemainingSeconds != nil {
			left = secs(*l.LeaseRemainingSeconds)
		}
		id := l.ID
		if s.HolderHolders != 0 {
			id += fmt.Sprintf(" (--holders %d)", s.HolderHolders)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%s\n", s.Slot, printable(id), printable(orUnknown(l.Hostname)), l.PID, l.Epoch, left)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	free := make([]string, len(r.Free))
	for i, s := range r.Free {
		free[i] = strconv.Itoa(s)
	}
	if len(free) == 0 {
		free = []string{"none"}
	}
	if _, err := fmt.Fprintf(w, "free slots: %s\n", strings.Join(free, ", ")); err != nil {
		return err
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	statusReport{Paused: r.Paused, StepDown: r.StepDown, StepDownVoid: r.StepDownVoid}.lastRunRow(func(k, v string) {
		fmt.Fprintf(tw, "%s\t%s\n", k, printable(v))
	})
	return tw.Flush()
}
