package agent

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/plugvisor/plugvisor/api"
	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/kubeletreg"
)

// DataDirEnv names the environment variable that sets the default data dir.
const DataDirEnv = "PLUGVISOR_DATA_DIR"

// DefaultDataDir is $PLUGVISOR_DATA_DIR, or ./.plugvisor.
func DefaultDataDir() string {
	if d := os.Getenv(DataDirEnv); d != "" {
		return d
	}
	return ".plugvisor"
}

// SocketPath is where the agent of dataDir serves its API.
func SocketPath(dataDir string) string { return filepath.Join(dataDir, "plugvisor.sock") }

// Config configures an agent. The zero value plus a DataDir works.
type Config struct {
	// DataDir holds the state file, the API socket and the watched plugin
	// directories (default DefaultDataDir()).
	DataDir string
	// SocketDirs and SpecDirs are watched for plugins besides
	// <data>/plugins and <data>/specs.
	SocketDirs, SpecDirs []string
	// RegistrationDirs are watched for kubelet's registration sockets
	// (node-driver-registrar's; kubelet's own directory is
	// kubeletreg.KubeletDir); none by default.
	RegistrationDirs []string
	// DockerDirs also watches Docker's own plugin directories
	// (discovery.DockerDirs), so the agent runs beside dockerd as a drop-in.
	DockerDirs bool
	// HTTPAddr, when set (e.g. 127.0.0.1:4646), also serves the API on
	// TCP. Beyond loopback it needs TLS; on loopback, TLS or TokenFile;
	// else the agent refuses to start (ErrUnprotectedHTTP) unless
	// HTTPInsecure is set.
	HTTPAddr string
	// HTTPHosts are further host names (no port) by which clients reach
	// HTTPAddr: the Host header of a request must name the listener.
	HTTPHosts []string
	// TLSCert and TLSKey are the TCP listener's certificate and key (PEM
	// files); clients must present a certificate signed by TLSCA.
	TLSCert, TLSKey, TLSCA string
	// TokenFile lists the ACL tokens the TCP listener requires (see
	// api.ParseTokens). The unix socket trusts its file mode instead.
	TokenFile string
	// HTTPInsecure serves HTTPAddr even without the protection its address
	// needs, with a warning at every start.
	HTTPInsecure bool
	// HTTPLimits bound the API server's timeouts, header size and
	// connections.
	HTTPLimits HTTPLimits
	// ResyncInterval and FingerprintInterval tune the plugin managers
	// (defaults 30s each).
	ResyncInterval, FingerprintInterval time.Duration
	// NodeID names this node in the CSI catalog (default: the host name).
	NodeID string
	// ResetCorruptState moves a corrupt state file aside and starts empty
	// instead of refusing to start.
	ResetCorruptState bool
	// LockTimeout bounds the wait for another agent's lock on the state
	// file (default 1s).
	LockTimeout time.Duration
	// VolumeOperationTimeout bounds a whole volume operation (mount,
	// unmount, claim, release, detach, create, delete, expand, snapshots)
	// and how long its caller waits; zero means the default (2 minutes),
	// negative is refused.
	VolumeOperationTimeout time.Duration
	// VolumeStatsInterval is how often each published volume's node plugin
	// is asked NodeGetVolumeStats, when it advertises GET_VOLUME_STATS:
	// the plugvisor_volume_stats_* series and the volume's condition
	// events follow it. Zero asks never; negative is refused.
	VolumeStatsInterval time.Duration
	// MaxPluginsPerType bounds the allocations of one plugin type
	// (default registry.DefaultPluginsPerType).
	MaxPluginsPerType int
	// MaxPluginOptionsBytes bounds one plugin's options, keys and values
	// together (default registry.DefaultOptionsBytes).
	MaxPluginOptionsBytes int
	// MaxSubscribers bounds the open event subscriptions, every API event
	// stream among them (default registry.DefaultSubscribers).
	MaxSubscribers int
	// BodyLimits bound the counts in one API request body: secrets,
	// parameters, topology segments, mount flags (api.Limits; zero fields
	// take their defaults, negative ones are refused).
	BodyLimits api.Limits
	// MaxVolumes bounds the volumes of the CSI catalog (default
	// model.DefaultMaxVolumes).
	MaxVolumes int
	// Logger receives the agent's logs (default: discard).
	Logger hclog.Logger
	// Cluster, when set, runs the agent in cluster mode (see
	// ClusterConfig); nil keeps the catalog on this node.
	Cluster *ClusterConfig
	// PluginTypes are the embedder's own plugin types (see PluginType),
	// started in order after the agent's own managers and stopped before
	// them, in reverse.
	PluginTypes []PluginType
}

// validate checks the raw config: a negative duration is an error, not a
// default.
func (c Config) validate() error {
	problems := []error{c.validateHTTP(), validatePluginTypes(c.PluginTypes)}
	if err := c.BodyLimits.Validate(); err != nil {
		problems = append(problems, fmt.Errorf("%w: %w", ErrInvalidConfig, err))
	}
	for _, d := range []struct {
		name  string
		value time.Duration
	}{{"ResyncInterval", c.ResyncInterval}, {"FingerprintInterval", c.FingerprintInterval}, {"LockTimeout", c.LockTimeout}} {
		if d.value < 0 {
			problems = append(problems, fmt.Errorf("%w: %s is %v; give a positive duration, or 0 for the default", ErrInvalidConfig, d.name, d.value))
		}
	}
	if w, op := c.HTTPLimits.WriteTimeout, cmp.Or(c.VolumeOperationTimeout, volumes.DefaultOperationTimeout); w > 0 && w <= op {
		problems = append(problems, fmt.Errorf("%w: HTTPLimits.WriteTimeout is %v, not above the volume operation timeout %v (flag -volume-op-timeout): "+
			"a mount that times out could not say so; give a longer write timeout, or leave it 0 for the default", ErrInvalidConfig, w, op))
	}
	if c.Cluster != nil {
		problems = append(problems, c.Cluster.validateEtcd())
	}
	for _, dir := range c.RegistrationDirs {
		if !filepath.IsAbs(dir) {
			problems = append(problems, fmt.Errorf("%w: registration dir %q is not absolute; give the full path from /, e.g. %s",
				ErrInvalidConfig, dir, kubeletreg.KubeletDir))
		}
	}
	return errors.Join(problems...)
}

func (c Config) withDefaults() Config {
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir()
	}
	if abs, err := filepath.Abs(c.DataDir); err == nil {
		c.DataDir = abs
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.ResyncInterval <= 0 {
		c.ResyncInterval = 30 * time.Second
	}
	if c.FingerprintInterval <= 0 {
		c.FingerprintInterval = 30 * time.Second
	}
	if c.LockTimeout <= 0 {
		c.LockTimeout = time.Second
	}
	if c.NodeID == "" {
		c.NodeID, _ = os.Hostname()
	}
	if c.HTTPLimits.WriteTimeout == 0 {
		// An answer must outlive the operation it reports.
		c.HTTPLimits.WriteTimeout = max(5*time.Minute, c.VolumeOperationTimeout+time.Minute)
	}
	c.HTTPLimits = c.HTTPLimits.withDefaults()
	return c
}

// ErrInvalidConfig: a setting is out of range or missing its partner.
var ErrInvalidConfig = errclass.New(errclass.Invalid, "invalid config")
