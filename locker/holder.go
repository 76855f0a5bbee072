package locker

import (
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// NewHolder describes this process as a holder of the key. Backends store
// its JSON (HolderRecord) as the value of their lock key so that `leaderrun
// status` on any host can say who leads. Epoch is left for the backend to
// fill from its own metadata when reading it back.
func NewHolder(opts Options) Holder {
	host, _ := os.Hostname()
	h := Holder{
		ID:         opts.ID,
		Hostname:   host,
		PID:        os.Getpid(),
		AcquiredAt: time.Now().UTC().Truncate(time.Millisecond),
		Version:    opts.Version,
		Priority:   opts.Priority,
	}
	if opts.Holders > 1 {
		h.Holders = opts.Holders
	}
	return h
}

// Record encodes the holder as the value stored on the backend.
func (h Holder) Record() []byte { return Encode(h, "holder record") }

// Encode is v's JSON, the form of every record leaderrun stores. v is
// plain data (strings, numbers, times), which cannot fail to marshal:
// what names the record in the panic that would say otherwise.
func Encode(v any, what string) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("encode %s: %v", what, err))
	}
	return b
}

// ParseHolder decodes a value written by Record. A value that is not a
// holder record (written by another tool) still yields a Holder whose ID is
// the raw value, so status output stays useful.
func ParseHolder(value []byte) Holder {
	var h Holder
	if err := json.Unmarshal(value, &h); err != nil || h.ID == "" {
		return Holder{ID: string(value)}
	}
	return h
}
