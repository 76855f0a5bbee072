//go:build linux

package cmdline

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/leaderrun/leaderrun/locker"
)

// slotFlag is check's --slot: the slot of a key run with --holders.
func slotFlag() cli.Flag {
	return &cli.IntFlag{Name: "slot", Category: catQuery, EnvVars: []string{"LEADER_SLOT"},
		Usage: "the slot `S` of a key run with --holders (LEADER_SLOT in the child); 0 is the key itself"}
}

// querySlotKey is the name check reads: the key, or its slot --slot.
func querySlotKey(c *cli.Context, key string) (string, error) {
	if !c.IsSet("slot") {
		return key, nil
	}
	s := c.Int("slot")
	if s < 0 || s >= locker.MaxHolders {
		return "", fmt.Errorf("--slot must be from 0 to %d, got %d", locker.MaxHolders-1, s)
	}
	return locker.SlotKey(key, s), nil
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
	report := slotsReport{Key: key, Backend: b.Name, Holders: n, Slots: []slotReport{}, Free: []int{}}
	for s := range n {
		o := opts
		o.Key = locker.SlotKey(key, s)
		lk, err := settings.New(o, true, newQuietLogger())
		if err != nil {
			return usage(configError(b, err))
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.Duration("timeout"))
		h, lerr := lk.Leader(ctx)
		cancel()
		lk.Close()
		r, err := newStatusReport(o.Key, b.Name, h, lerr)
		if err != nil {
			return usage(fmt.Errorf("status of slot %d of key %q: %w", s, key, err))
		}
		sr := slotReport{Slot: s, Leader: r.Leader}
		if r.Leader == nil {
			report.Free = append(report.Free, s)
		} else if max(h.Holders, 1) != n {
			sr.HolderHolders = max(h.Holders, 1)
		}
		report.Slots = append(report.Slots, sr)
	}
	if c.Bool("json") {
		return writeJSON(os.Stdout, report)
	}
	return report.writeText(os.Stdout, time.Now())
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
	_, err := fmt.Fprintf(w, "free slots: %s\n", strings.Join(free, ", "))
	return err
}
