// Command writer is the child that leaderrun's chaos suite and benchmark run
// under leadership: it writes to the fenced resource (package fence) every
// 10ms, carrying its LEADER_EPOCH, until it is killed.
//
// At its start it asks the fence for the previous writer's pid and reads
// that process's state from /proc, so that "the old child was already dead
// when the new one started" is observed by the new child itself.
//
// Environment:
//
//	FENCE_NETWORK  tcp (default) or unix
//	FENCE_ADDR     the fence's address
//	FENCE_ADDR_<S> the address of slot S's fence: with LEADER_SLOT=S set
//	               (leaderrun --holders N) the writer writes there instead,
//	               one fenced resource per slot
//	FENCE_WRITER   this writer's name (default hostname:parent-pid)
//	LEADER_EPOCH   the fencing token; 0 when absent (rival lock tools)
//	FENCE_ESCAPE   1: write from a daemon that left the process group and
//	               session (setsid and a double fork; see escape.go)
//	FENCE_STORM    N: keep N chains of short-lived relay processes forking
//	               beside the writer (see storm.go)
//	FENCE_LINGER   1: ignore SIGTERM and keep writing until SIGKILL, as a
//	               job that takes its whole kill grace to stop
package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/leaderrun/leaderrun/tests/fence"
)

// interval is the pause between two writes.
const interval = 10 * time.Millisecond

// dialTimeout bounds reaching the fence at start.
const dialTimeout = 5 * time.Second

func main() {
	started := fence.Now() // first: this is "the child started"
	if os.Getenv("FENCE_LINGER") == "1" {
		signal.Ignore(syscall.SIGTERM)
	}
	ok, err := stormStage()
	if !ok {
		ok, err = escapeStage(started)
	}
	if !ok {
		if err = startStorm(); err == nil {
			err = run(started)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "writer:", err)
		os.Exit(1)
	}
}

func run(started fence.Mono) error {
	network := os.Getenv("FENCE_NETWORK")
	if network == "" {
		network = "tcp"
	}
	addr := os.Getenv("FENCE_ADDR")
	if addr == "" {
		return fmt.Errorf("FENCE_ADDR is not set")
	}
	if slot := os.Getenv("LEADER_SLOT"); slot != "" {
		if a := os.Getenv("FENCE_ADDR_" + slot); a != "" {
			addr = a
		}
	}
	name := os.Getenv("FENCE_WRITER")
	if name == "" {
		host, _ := os.Hostname()
		name = fmt.Sprintf("%s:%d", host, os.Getppid())
	}
	name = strings.Join(strings.Fields(name), "_")
	var epoch uint64
	if s := os.Getenv("LEADER_EPOCH"); s != "" {
		var err error
		if epoch, err = strconv.ParseUint(s, 10, 64); err != nil {
			return fmt.Errorf("LEADER_EPOCH %q: %w", s, err)
		}
	}
	conn, err := net.DialTimeout(network, addr, dialTimeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	r := bufio.NewReader(conn)

	if _, err := fmt.Fprintf(conn, "hello %s %d %d %d\n", name, os.Getpid(), epoch, started); err != nil {
		return err
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	prev, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(line), "prev "))
	if err != nil {
		return fmt.Errorf("bad reply %q", line)
	}
	if prev > 0 {
		if _, err := fmt.Fprintf(conn, "check %d %s\n", prev, procState(prev)); err != nil {
			return err
		}
	}

	ping := pinger()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for seq := uint64(1); ; seq++ {
		if _, err := fmt.Fprintf(conn, "write %d\n", seq); err != nil {
			return err
		}
		if _, err := r.ReadString('\n'); err != nil {
			return err
		}
		ping(seq == 1)
		<-tick.C
	}
}

// pinger, with FENCE_PING=1, sends READY=1 after the first write and
// WATCHDOG=1 after each to NOTIFY_SOCKET (the notify protocol, one
// datagram each): a writer that stops writing stops pinging. Otherwise
// it does nothing.
func pinger() func(first bool) {
	sock := os.Getenv("NOTIFY_SOCKET")
	if os.Getenv("FENCE_PING") != "1" || sock == "" {
		return func(bool) {}
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		fmt.Fprintln(os.Stderr, "writer: notify socket:", err)
		return func(bool) {}
	}
	return func(first bool) {
		msg := "WATCHDOG=1"
		if first {
			msg = "READY=1\nWATCHDOG=1"
		}
		_, _ = conn.Write([]byte(msg))
	}
}

// procState is the state letter of pid from /proc/<pid>/stat, or "gone".
func procState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "gone"
	}
	s := string(b)
	// The state follows the command name, which is in parentheses and may
	// itself contain spaces or parentheses.
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return "gone"
	}
	return s[i+2 : i+3]
}
