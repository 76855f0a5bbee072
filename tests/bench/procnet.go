//go:build linux

package bench

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// tcpEstablished is the state column of /proc/net/tcp for an established
// connection.
const tcpEstablished = "01"

// connectedTo reports whether process pid holds an established TCP
// connection to one of addrs (127.0.0.1:port): its sockets, found through
// /proc/PID/fd, matched by inode against /proc/PID/net/tcp.
func connectedTo(pid int, addrs []string) (bool, error) {
	want := map[string]bool{}
	for _, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			return false, err
		}
		ip := net.ParseIP(host).To4()
		p, err := strconv.Atoi(port)
		if ip == nil || err != nil {
			return false, fmt.Errorf("connectedTo: %q is not an IPv4 address with a port", a)
		}
		// /proc/net/tcp writes the address as the 32-bit word in host
		// (little-endian) order, then the port, in hex.
		want[fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], p)] = true
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return false, nil // gone: not connected
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(target, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(target, "socket:["), "]")] = true
		}
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/net/tcp", pid))
	if err != nil {
		return false, nil
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		fields := strings.Fields(sc.Text())
		if len(fields) > 9 && want[fields[2]] && fields[3] == tcpEstablished && inodes[fields[9]] {
			return true, nil
		}
	}
	return false, sc.Err()
}
