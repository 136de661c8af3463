package agent

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/plugvisor/plugvisor/names"
)

// EtcdReach is how an etcd client reaches its endpoints: which are plain
// (no TLS), and which of those are off this host.
type EtcdReach struct {
	// Plain are the endpoints reached without TLS: http:// URLs, unix://
	// sockets, and host:port without a TLS config.
	Plain []string
	// Remote are the endpoints of Plain whose host is not loopback: anyone
	// on the network between could read and forge the fleet's state.
	Remote []string
	// Mixed is set when some endpoints are plain and others TLS. etcd's
	// client reaches every endpoint with the first one's credentials, so
	// one http:// URL first would send the others' traffic in the clear.
	Mixed bool
}

// ReachEtcd sorts endpoints as etcd's client (v3.5) reaches them, with a
// TLS config when tlsSet.
func ReachEtcd(endpoints []string, tlsSet bool) EtcdReach {
	var r EtcdReach
	secure := 0
	for _, ep := range endpoints {
		plain, host := etcdEndpoint(ep, tlsSet)
		if !plain {
			secure++
			continue
		}
		r.Plain = append(r.Plain, ep)
		if !names.LoopbackHost(host) {
			r.Remote = append(r.Remote, ep)
		}
	}
	r.Mixed = secure > 0 && len(r.Plain) > 0
	return r
}

// etcdEndpoint says whether ep is reached without TLS, and its host ("localhost"
// for a unix socket, which stays on this host).
func etcdEndpoint(ep string, tlsSet bool) (plain bool, host string) {
	if !strings.Contains(ep, "://") {
		host, _, err := net.SplitHostPort(ep)
		if err != nil {
			host = ep
		}
		return !tlsSet, host
	}
	u, err := url.Parse(ep)
	if err != nil {
		return true, ep
	}
	switch u.Scheme {
	case "https", "unixs":
		return false, u.Hostname()
	case "unix":
		return !tlsSet, "localhost"
	}
	return true, u.Hostname()
}

// validateEtcd refuses an etcd that the cluster config would reach in the
// clear off this host, or partly in the clear, and a user without a
// password (or a password without a user).
func (c *ClusterConfig) validateEtcd() error {
	var problems []error
	r := ReachEtcd(c.Etcd, c.EtcdTLS != nil)
	switch {
	case r.Mixed:
		problems = append(problems, fmt.Errorf("%w: Cluster.Etcd (-cluster-etcd) mixes plain and TLS URLs (plain: %s): etcd's client reaches every one as it reaches the first; give https:// to all",
			ErrInvalidConfig, strings.Join(r.Plain, ", ")))
	case len(r.Remote) > 0:
		problems = append(problems, fmt.Errorf("%w: Cluster.Etcd (-cluster-etcd) %s is reached without TLS off this host, where anyone on the network could read the fleet's secrets and forge its claims: "+
			"give https:// URLs with -cluster-etcd-ca, -cluster-etcd-cert and -cluster-etcd-key (plugvisor tls makes them); plain HTTP works on loopback only",
			ErrInvalidConfig, strings.Join(r.Remote, ", ")))
	}
	if (c.EtcdUsername == "") != (c.EtcdPassword == "") {
		problems = append(problems, fmt.Errorf("%w: Cluster.EtcdUsername and Cluster.EtcdPassword (-cluster-etcd-username, -cluster-etcd-password-file) go together", ErrInvalidConfig))
	}
	return errors.Join(problems...)
}

// warnPlainEtcd logs, at every start, that etcd is reached without TLS
// (on loopback: validateEtcd refused the rest).
func (a *Agent) warnPlainEtcd(c *ClusterConfig) {
	if plain := ReachEtcd(c.Etcd, c.EtcdTLS != nil).Plain; len(plain) > 0 {
		a.log.Warn("INSECURE: etcd is reached without TLS (" + strings.Join(plain, ", ") + "): every process on this host can read the fleet's state, " +
			"volume secrets included, and forge its claims; give https:// URLs with -cluster-etcd-ca, -cluster-etcd-cert and -cluster-etcd-key")
	}
}
