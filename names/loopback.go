package names

import "net"

// LoopbackHost reports whether host, as written in an address, is
// loopback: "localhost" or a loopback IP. It resolves nothing. Every
// listener that may go without TLS on loopback only asks this.
func LoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
