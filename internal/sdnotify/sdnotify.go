// Package sdnotify tells systemd how a service of Type=notify is doing,
// over the datagram socket systemd names in $NOTIFY_SOCKET (see
// sd_notify(3)). Outside systemd the variable is unset and Notify does
// nothing.
package sdnotify

import (
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The states a service reports.
const (
	// Ready: the service is up, and systemd starts the units that wait for
	// it. Sent after Reloading, it ends the reload.
	Ready = "READY=1"
	// Stopping: the service is shutting down.
	Stopping = "STOPPING=1"
)

// SocketEnv is the variable systemd sets to the notification socket.
const SocketEnv = "NOTIFY_SOCKET"

// Reloading is the state a service sends when it starts to reload its
// configuration, with the time on the monotonic clock that systemd
// needs to tell this reload from a later one.
func Reloading() string {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return fmt.Sprintf("RELOADING=1\nMONOTONIC_USEC=%d", ts.Nano()/int64(time.Microsecond))
}

// Status is a one-line description systemctl status shows.
func Status(s string) string {
	return "STATUS=" + strings.ReplaceAll(s, "\n", " ")
}

// Notify sends states, one a line, to the socket $NOTIFY_SOCKET names. It
// reports false, and does nothing, when the variable is unset. A path
// starting with "@" is a socket in the abstract namespace.
func Notify(states ...string) (bool, error) {
	path := os.Getenv(SocketEnv)
	if path == "" {
		return false, nil
	}
	if strings.HasPrefix(path, "@") {
		path = "\x00" + path[1:]
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return false, fmt.Errorf("sd_notify: %w", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(strings.Join(states, "\n"))); err != nil {
		return false, fmt.Errorf("sd_notify: %w", err)
	}
	return true, nil
}
