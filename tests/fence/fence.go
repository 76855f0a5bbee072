// Package fence is a fenced resource for leaderrun's chaos suite and
// benchmark: a small server that children write to with their LEADER_EPOCH.
//
// It accepts a write only when its epoch is at least the highest epoch it
// accepted before, and it records every write, accepted or rejected, with a
// CLOCK_MONOTONIC timestamp and the identity of the process that sent it. A
// test then proves from the record that two leaders' writes never
// interleaved, that accepted epochs never went down, and that whatever a
// frozen old leader wrote after waking up was turned away (DESIGN §1, "the
// lease alone never gives mutual exclusion").
//
// The writer side is the program in tests/fence/writer, which a child
// under test runs. The protocol is one text line each way on a stream
// connection (loopback TCP or a unix socket):
//
//	writer → fence  hello <writer> <pid> <epoch> <started-ns>
//	fence → writer  prev <pid>           the previous writer process, 0 if none
//	writer → fence  check <pid> <state>  that process's /proc state at our start
//	writer → fence  write <seq>
//	fence → writer  ok | reject <highest>
//
// Times are CLOCK_MONOTONIC nanoseconds, one clock for every process on the
// host, so the writer's own start time and the server's receive times can be
// compared directly.
package fence

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// Mono is a point on CLOCK_MONOTONIC in nanoseconds.
type Mono int64

// Now reads CLOCK_MONOTONIC.
func Now() Mono {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return Mono(ts.Nano())
}

// Sub is the duration m - o.
func (m Mono) Sub(o Mono) time.Duration { return time.Duration(m - o) }

// Add is m moved by d.
func (m Mono) Add(d time.Duration) Mono { return m + Mono(d) }

// Instance is one writer process: one connection to the fence.
type Instance struct {
	// ID is the instance's index in Log.Instances.
	ID int
	// Writer names the host or candidate the process belongs to.
	Writer string
	// Pid is the writer process's id.
	Pid int
	// Epoch is the LEADER_EPOCH the process was started with (0 if none).
	Epoch uint64
	// Started is the writer's own clock reading at the top of its main.
	Started Mono
	// Hello is when its hello arrived.
	Hello Mono
	// Prev is the pid of the writer process that said hello before this
	// one, 0 for the first.
	Prev int
	// PrevState is Prev's state as this process read it from
	// /proc/<pid>/stat at its start: a state letter, "gone", or "" if it
	// did not report one.
	PrevState string
	// Closed is when the connection ended: the process died or closed it.
	// Zero while it is connected.
	Closed Mono
	// Accepted and Rejected count the instance's writes.
	Accepted, Rejected int
}

// PrevAlive reports whether the previous writer process still ran when this
// one started, by the process's own check. A zombie counts as dead.
func (in Instance) PrevAlive() bool {
	switch in.PrevState {
	case "", "gone", "Z", "X", "x":
		return false
	}
	return true
}

// Name is the instance as "writer/pid".
func (in Instance) Name() string { return fmt.Sprintf("%s/%d", in.Writer, in.Pid) }

// Write is one write attempt.
type Write struct {
	// Instance is the writer instance's index in Log.Instances.
	Instance int
	Epoch    uint64
	Seq      uint64
	// At is when the fence received it.
	At Mono
	// Accepted is the fence's verdict.
	Accepted bool
}

// Log is a copy of what the fence recorded.
type Log struct {
	// Instances are every writer process that ever connected, in hello
	// order.
	Instances []Instance
	// Writes are write attempts in the order the fence decided them.
	Writes []Write
}

// Server is the fenced resource.
type Server struct {
	ln net.Listener

	mu        sync.Mutex
	highest   uint64
	instances []Instance
	writes    []Write
	conns     map[net.Conn]struct{}
	closed    bool

	wg sync.WaitGroup
}

// Listen starts a fence on network ("tcp" or "unix") and address, e.g.
// "127.0.0.1:0" or a socket path.
func Listen(network, address string) (*Server, error) {
	ln, err := net.Listen(network, address)
	if err != nil {
		return nil, fmt.Errorf("fence: listen: %w", err)
	}
	s := &Server{ln: ln, conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Network is the listener's network, for the writer's FENCE_NETWORK.
func (s *Server) Network() string { return s.ln.Addr().Network() }

// Addr is the listener's address, for the writer's FENCE_ADDR.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Env is what a writer needs in its environment to reach this fence, plus
// its writer name.
func (s *Server) Env(writer string) []string {
	return []string{"FENCE_NETWORK=" + s.Network(), "FENCE_ADDR=" + s.Addr(), "FENCE_WRITER=" + writer}
}

// Close stops accepting, drops every connection (writers then exit) and
// waits for the server's goroutines.
func (s *Server) Close() error {
	err := s.ln.Close()
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

func (s *Server) accept() {
	defer s.wg.Done()
	testsupport.AcceptEach(s.ln, func(c net.Conn) {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serve(c)
	})
}

// serve runs one writer's connection. Its goroutine sits in Read whenever
// the writer is quiet, so the end of the connection, which the kernel
// causes as the writer process exits, is stamped without delay.
func (s *Server) serve(c net.Conn) {
	defer s.wg.Done()
	id := -1
	defer func() {
		now := Now()
		s.mu.Lock()
		if id >= 0 {
			s.instances[id].Closed = now
		}
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		at := Now()
		reply, err := s.handle(&id, strings.TrimSpace(line), at)
		if err != nil {
			return
		}
		if reply != "" {
			if _, err := c.Write([]byte(reply + "\n")); err != nil {
				return
			}
		}
	}
}

// errProtocol ends a connection that does not follow the protocol.
var errProtocol = errors.New("fence: protocol error")

// handle applies one message and returns the reply line, if any.
func (s *Server) handle(id *int, line string, at Mono) (string, error) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return "", errProtocol
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case f[0] == "hello" && len(f) == 5 && *id < 0:
		pid, err1 := strconv.Atoi(f[2])
		epoch, err2 := strconv.ParseUint(f[3], 10, 64)
		started, err3 := strconv.ParseInt(f[4], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			return "", errProtocol
		}
		prev := 0
		if n := len(s.instances); n > 0 {
			prev = s.instances[n-1].Pid
		}
		*id = len(s.instances)
		s.instances = append(s.instances, Instance{
			ID: *id, Writer: f[1], Pid: pid, Epoch: epoch, Started: Mono(started), Hello: at, Prev: prev,
		})
		return "prev " + strconv.Itoa(prev), nil
	case f[0] == "check" && len(f) == 3 && *id >= 0:
		s.instances[*id].PrevState = f[2]
		return "", nil
	case f[0] == "write" && len(f) == 2 && *id >= 0:
		seq, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return "", errProtocol
		}
		in := &s.instances[*id]
		// The fencing rule: never accept an epoch lower than one already
		// accepted.
		ok := in.Epoch >= s.highest
		if ok {
			s.highest = in.Epoch
			in.Accepted++
		} else {
			in.Rejected++
		}
		s.writes = append(s.writes, Write{Instance: *id, Epoch: in.Epoch, Seq: seq, At: at, Accepted: ok})
		if !ok {
			return "reject " + strconv.FormatUint(s.highest, 10), nil
		}
		return "ok", nil
	}
	return "", errProtocol
}

// Len is the number of writes recorded so far; pass it to Log later to see
// only what came after.
func (s *Server) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.writes)
}

// Log copies the writes recorded from index from on, and every instance.
func (s *Server) Log(from int) Log {
	s.mu.Lock()
	defer s.mu.Unlock()
	from = min(max(from, 0), len(s.writes))
	return Log{
		Instances: append([]Instance(nil), s.instances...),
		Writes:    append([]Write(nil), s.writes[from:]...),
	}
}

// Instances copies the instances recorded so far.
func (s *Server) Instances() []Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Instance(nil), s.instances...)
}

// LastAccepted returns the latest accepted write and its instance; ok is
// false before the first.
func (s *Server) LastAccepted() (Write, Instance, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.writes) - 1; i >= 0; i-- {
		if w := s.writes[i]; w.Accepted {
			return w, s.instances[w.Instance], true
		}
	}
	return Write{}, Instance{}, false
}

// Highest is the highest epoch accepted so far.
func (s *Server) Highest() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.highest
}
