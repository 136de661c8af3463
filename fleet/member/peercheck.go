package member

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/hashicorp/go-hclog"

	"github.com/plugvisor/plugvisor/errclass"
)

// ErrPeerTLS is returned by Start when the members already in the fleet
// and this one do not accept each other's certificates: this member would
// hold volume grains nobody could reach, so it does not join.
var ErrPeerTLS = errclass.New(errclass.Denied, "the fleet's members and this one refuse each other's TLS")

// maxPeerChecks bounds how many members a joining member checks.
const maxPeerChecks = 5

// errTLSRefused marks a TLS handshake with a peer that failed on
// certificates (either side's), not on reaching it.
var errTLSRefused = errclass.New(errclass.Denied, "TLS refused")

// peerCheck is a TLS handshake with a peer's remote, as protoactor's
// remote would make it, at an address.
type peerCheck func(ctx context.Context, address string) error

// tlsPeerCheck shakes hands with a peer's gRPC server with the remote's
// client config, and reads its first frame: in TLS 1.3 a server that
// refuses the client's certificate says so only then. An error wrapping
// errTLSRefused means the certificates do not fit; any other means the
// peer could not be reached.
func tlsPeerCheck(client *tls.Config, timeout time.Duration) peerCheck {
	return func(ctx context.Context, address string) error {
		cfg := client.Clone()
		cfg.NextProtos = []string{"h2"}
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(address)
		}
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		raw, err := (&net.Dialer{}).DialContext(ctx, "tcp", address)
		if err != nil {
			return err
		}
		conn := tls.Client(raw, cfg)
		defer conn.Close()
		deadline, _ := ctx.Deadline()
		_ = conn.SetDeadline(deadline)
		if err := conn.HandshakeContext(ctx); err != nil {
			return tlsFailure(err)
		}
		if _, err := conn.Read(make([]byte, 1)); err != nil {
			return tlsFailure(err)
		}
		return nil
	}
}

// tlsFailure marks err with errTLSRefused when it is about certificates:
// ours refused by the peer (an alert), or the peer's that we do not
// trust.
func tlsFailure(err error) error {
	var alert tls.AlertError
	var verify *tls.CertificateVerificationError
	if errors.As(err, &alert) || errors.As(err, &verify) {
		return fmt.Errorf("%w: %w", errTLSRefused, err)
	}
	return err
}

// checkPeers checks, with check, the remote of up to maxPeerChecks other
// members: it refuses to join (ErrPeerTLS) only when some refused TLS and
// none accepted it. Members it cannot reach (gone, with their key still in
// etcd until their lease ends) count for nothing.
func checkPeers(ctx context.Context, check peerCheck, self string, members []*cluster.Member) error {
	var refused []string
	checked := 0
	for _, m := range members {
		if m.GetId() == self || checked == maxPeerChecks {
			continue
		}
		checked++
		err := check(ctx, m.Address())
		switch {
		case err == nil:
			return nil
		case errors.Is(err, errTLSRefused):
			refused = append(refused, fmt.Sprintf("%s at %s: %v", m.GetId(), m.Address(), err))
		}
	}
	if len(refused) == 0 {
		return nil
	}
	return fmt.Errorf("%w (%v); give every member certificates of the fleet's CA (-cluster-ca, -cluster-cert, -cluster-key): a member the others cannot reach would hold volumes nobody could change",
		ErrPeerTLS, refused)
}

// membersOnly wraps a server's VerifyConnection (next, nil for none) to
// refuse, on the member port, a client whose certificate (verified against
// the fleet's CA already) is not a member's: a member serves the port with
// the same certificate it dials with, so it has server use. A certificate
// of the same CA for client use only (plugvisor tls cert create -cli)
// reaches etcd, never a volume's grain.
func membersOnly(next func(tls.ConnectionState) error, log hclog.Logger) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if err := memberClientOnly(cs); err != nil {
			log.Warn("refused a client of the member port", "error", err)
			return err
		}
		if next != nil {
			return next(cs)
		}
		return nil
	}
}

// memberClientOnly is membersOnly's check.
func memberClientOnly(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return nil // the server's ClientAuth says whether one is needed
	}
	leaf := cs.PeerCertificates[0]
	if !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageServerAuth) && !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageAny) && len(leaf.ExtKeyUsage) > 0 {
		return fmt.Errorf("the client's certificate %q is not a member's: it has no server use (plugvisor tls cert create -agent NODE makes a member's)",
			leaf.Subject.CommonName)
	}
	return nil
}
