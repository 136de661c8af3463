package api

import (
	"net"
	"syscall"
)

// peerOf reads the credentials of c's peer (SO_PEERCRED).
func peerOf(c *net.UnixConn) (PeerAddr, bool) {
	raw, err := c.SyscallConn()
	if err != nil {
		return PeerAddr{}, false
	}
	var cred *syscall.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil || credErr != nil {
		return PeerAddr{}, false
	}
	return PeerAddr{UID: int(cred.Uid), PID: int(cred.Pid)}, true
}
