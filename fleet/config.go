package fleet

import (
	"cmp"
	"crypto/tls"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/names"
)

// Defaults and bounds of Config.
const (
	// DefaultPrefix is where the fleet's keys live in etcd.
	DefaultPrefix = "/plugvisor/"
	// DefaultLeaseTTL is how long a node stays up after its last keep-alive.
	DefaultLeaseTTL = 10 * time.Second
	// MinLeaseTTL is the shortest lease etcd is asked for.
	MinLeaseTTL = 2 * time.Second
	// DefaultRequestTimeout bounds each call to etcd.
	DefaultRequestTimeout = 5 * time.Second
	// DefaultMaxAttempts bounds the attempts of one claim or release that
	// lose the race to other writers of the same volume.
	DefaultMaxAttempts = 256
)

// Config configures a Store. Endpoints and NodeID are required.
type Config struct {
	// Endpoints are the etcd client URLs (agent flag -cluster-etcd).
	Endpoints []string
	// TLS, when set, is used to reach etcd.
	TLS *tls.Config
	// Username and Password, when set, authenticate to an etcd with auth
	// enabled (agent flags -cluster-etcd-username and
	// -cluster-etcd-password-file).
	Username, Password string
	// NodeID is this node: the owner of the lease, the liveness key and
	// the fingerprints this Store puts.
	NodeID string
	// Identity is a secret that proves a live node ID is this agent's own:
	// an agent keeps it in its data dir, so that after a kill -9 it takes
	// its node ID back at once, while another agent with the same node ID
	// is refused (ErrNodeIDTaken) until the first one's lease runs out.
	// Empty means a new random one (NewIdentity) for this Store.
	Identity string
	// Address is where this agent's cluster member listens: the liveness
	// record shows it, to name the agent holding a node ID.
	Address string
	// Keyring, when set, seals every record this Store writes and checks
	// every record it reads (see Keyring): secrets encrypted at rest,
	// records authenticated. Every agent of a fleet needs the same one.
	Keyring *Keyring
	// AcceptUnsealed lets a Store with a Keyring read records that are not
	// sealed, while a fleet moves to a keyring: until plugvisor keyring
	// rotate has sealed every record. Off, such a record is refused
	// (ErrUnsealed), as a forgery would be.
	AcceptUnsealed bool
	// Prefix is where the keys live (default DefaultPrefix); it must start
	// and end with "/".
	Prefix string
	// LeaseTTL is the node's lease, in whole seconds (default
	// DefaultLeaseTTL, at least MinLeaseTTL): a node that does not renew it
	// for this long is down.
	LeaseTTL time.Duration
	// RequestTimeout bounds each call to etcd (default DefaultRequestTimeout).
	RequestTimeout time.Duration
	// MaxAttempts bounds the attempts of a claim or release that keeps
	// losing the race for its volume (default DefaultMaxAttempts); the
	// request timeout bounds them too.
	MaxAttempts int
	// MaxVolumes bounds the fleet's volumes, every namespace together
	// (default model.DefaultMaxVolumes): registering a new volume beyond
	// it is refused with model.ErrVolumeLimit (agent flag -max-volumes).
	MaxVolumes int
	// Logger receives the fleet's log lines; nil discards them.
	Logger hclog.Logger
	// Metrics hears the fleet's etcd calls, claims, GC and grains; nil
	// hears nothing.
	Metrics Metrics
}

// validate checks the raw config: zero means a default, negative is an error.
func (cfg Config) validate() error {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if len(cfg.Endpoints) == 0 {
		bad("Endpoints is empty: give the etcd client URLs (agent flag -cluster-etcd)")
	}
	if err := names.Check("node ID", cfg.NodeID); err != nil {
		bad("NodeID: %v", err)
	}
	if cfg.Prefix != "" && (!strings.HasPrefix(cfg.Prefix, "/") || !strings.HasSuffix(cfg.Prefix, "/")) {
		bad("Prefix is %q: it must start and end with \"/\", like %q", cfg.Prefix, DefaultPrefix)
	}
	if cfg.LeaseTTL != 0 && (cfg.LeaseTTL < MinLeaseTTL || cfg.LeaseTTL%time.Second != 0) {
		bad("LeaseTTL is %v: give whole seconds, at least %v (etcd grants leases in seconds), or 0 for the default %v",
			cfg.LeaseTTL, MinLeaseTTL, DefaultLeaseTTL)
	}
	if cfg.RequestTimeout < 0 {
		bad("RequestTimeout is %v: give a positive duration, or 0 for the default %v", cfg.RequestTimeout, DefaultRequestTimeout)
	}
	if cfg.MaxVolumes < 0 {
		bad("MaxVolumes is %d: give a positive number, or 0 for the default %d", cfg.MaxVolumes, model.DefaultMaxVolumes)
	}
	if cfg.MaxAttempts < 0 {
		bad("MaxAttempts is %d: give a positive number, or 0 for the default %d", cfg.MaxAttempts, DefaultMaxAttempts)
	}
	if len(problems) > 0 {
		return model.Refusef(model.ErrInvalid, "config: %s", strings.Join(problems, "; "))
	}
	return nil
}

func (cfg Config) withDefaults() Config {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	cfg.Logger = cfg.Logger.Named("fleet")
	if cfg.Metrics == nil {
		cfg.Metrics = noMetrics{}
	}
	if cfg.Identity == "" {
		cfg.Identity = NewIdentity()
	}
	cfg.Prefix = cmp.Or(cfg.Prefix, DefaultPrefix)
	cfg.LeaseTTL = cmp.Or(cfg.LeaseTTL, DefaultLeaseTTL)
	cfg.RequestTimeout = cmp.Or(cfg.RequestTimeout, DefaultRequestTimeout)
	cfg.MaxAttempts = cmp.Or(cfg.MaxAttempts, DefaultMaxAttempts)
	cfg.MaxVolumes = cmp.Or(cfg.MaxVolumes, model.DefaultMaxVolumes)
	return cfg
}
