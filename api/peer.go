package api

import (
	"net"
	"strconv"
)

// PeerListener wraps a unix socket listener so that each connection's
// RemoteAddr is a PeerAddr: the credentials of the process that connected,
// as the kernel vouches for them (SO_PEERCRED on Linux). The API names a
// caller on the unix socket by them in logs and events ("unix:uid=0").
// Connections of other kinds, or whose credentials cannot be read, pass
// unchanged.
func PeerListener(l net.Listener) net.Listener { return peerListener{l} }

type peerListener struct{ net.Listener }

func (l peerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return c, err
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return c, nil
	}
	peer, ok := peerOf(uc)
	if !ok {
		return c, nil
	}
	return peerConn{UnixConn: uc, peer: peer}, nil
}

// PeerAddr is the process at the other end of a unix socket connection.
type PeerAddr struct{ UID, PID int }

// Network is "unix".
func (PeerAddr) Network() string { return "unix" }

// String is "uid=<uid>,pid=<pid>".
func (a PeerAddr) String() string {
	return "uid=" + strconv.Itoa(a.UID) + ",pid=" + strconv.Itoa(a.PID)
}

type peerConn struct {
	*net.UnixConn
	peer PeerAddr
}

func (c peerConn) RemoteAddr() net.Addr { return c.peer }
