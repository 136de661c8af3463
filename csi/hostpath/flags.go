package hostpath

import (
	"flag"
	"strconv"
)

// The command-line flags RegisterFlags defines and Args writes.
const (
	flagName            = "name"
	flagVersion         = "version"
	flagNodeID          = "node-id"
	flagRoot            = "root"
	flagMode            = "mode"
	flagMaxVolumes      = "max-volumes"
	flagSymlinkFallback = "symlink-fallback"
	flagAttachRequired  = "attach-required"
	flagTopology        = "topology"
)

// RegisterFlags defines the flags -name, -version, -node-id, -root, -mode,
// -max-volumes, -symlink-fallback, -attach-required and -topology on fs, storing into c. The current
// values of c are the defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Name, flagName, c.Name, "CSI plugin name reported by GetPluginInfo")
	fs.StringVar(&c.Version, flagVersion, c.Version, "vendor version reported by GetPluginInfo")
	fs.StringVar(&c.NodeID, flagNodeID, c.NodeID, "node ID reported by NodeGetInfo, also the topology segment")
	fs.StringVar(&c.Root, flagRoot, c.Root, "absolute directory holding volumes (<root>/volumes/<id>) and their state")
	fs.Var(&c.Mode, flagMode, "services to serve besides Identity: controller, node or monolith (both)")
	fs.Int64Var(&c.MaxVolumes, flagMaxVolumes, c.MaxVolumes, "volumes this node may stage at once (and, with -attach-required, have attached), reported by NodeGetInfo (0: no limit)")
	fs.BoolVar(&c.SymlinkFallback, flagSymlinkFallback, c.SymlinkFallback, "publish with a symlink when a bind mount is not permitted (not root) instead of failing")
	fs.BoolVar(&c.AttachRequired, flagAttachRequired, c.AttachRequired, "require ControllerPublishVolume to a node before it stages or publishes, "+
		"and its publish_context on NodeStageVolume and NodePublishVolume, as drivers of network disks do")
	fs.BoolVar(&c.Topology, flagTopology, c.Topology, "advertise VOLUME_ACCESSIBILITY_CONSTRAINTS, as drivers of zonal disks do: "+
		"the agent then requires a topology on every volume of the plugin (volume register -topology, volume create -requisite or -preferred)")
}

// Args returns the command-line flags that make the hostpath-csi binary
// run with c (Logger aside). Zero fields are left to the binary's defaults.
func (c Config) Args() []string {
	var args []string
	add := func(name, value string) {
		if value != "" {
			args = append(args, "-"+name+"="+value)
		}
	}
	add(flagName, c.Name)
	add(flagVersion, c.Version)
	add(flagNodeID, c.NodeID)
	add(flagRoot, c.Root)
	add(flagMode, string(c.Mode))
	if c.MaxVolumes != 0 {
		add(flagMaxVolumes, strconv.FormatInt(c.MaxVolumes, 10))
	}
	if c.SymlinkFallback {
		add(flagSymlinkFallback, "true")
	}
	if c.AttachRequired {
		add(flagAttachRequired, "true")
	}
	if c.Topology {
		add(flagTopology, "true")
	}
	return args
}

// String returns the mode's name (flag.Value).
func (m *Mode) String() string {
	if m == nil {
		return ""
	}
	return string(*m)
}

// Set parses a mode name (flag.Value).
func (m *Mode) Set(s string) error {
	if err := Mode(s).check(); err != nil {
		return err
	}
	*m = Mode(s)
	return nil
}
