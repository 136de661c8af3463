package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/discovery"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/names"
	"github.com/plugvisor/plugvisor/registry"
)

// PluginType is a plugin type an embedder adds to the agent
// (Config.PluginTypes), defined outside plugvisor: typically a manager
// actor embedding plugintype.Instances, behind a facade that implements
// TypeManager. The agent starts it after the registry and its own
// managers, before discovery; stops it before its own managers, the
// registry and the store; lists its instances in /v1/health; and gives it
// the metrics its own managers count into. examples/deviceplugin is one.
type PluginType struct {
	// Name is the registry plugin type whose plugins the manager serves,
	// such as "device-plugin". It must not be a built-in type (BuiltInTypes).
	Name string
	// Manager starts and stops the type's manager.
	Manager TypeManager
}

// TypeManager is the manager of an embedder's plugin type.
type TypeManager interface {
	// Start starts the manager; an error stops the agent's start, and
	// whatever had started is stopped again.
	Start(env TypeEnv) error
	// Instances returns the latest health of the type's current instances,
	// for /v1/health. It is called from any goroutine and must not wait on
	// an actor.
	Instances() []InstanceHealth
	// Shutdown stops the manager and its instances.
	Shutdown(ctx context.Context) error
}

// TypeEnv is what the agent gives a TypeManager at Start.
type TypeEnv struct {
	// Type is the PluginType's Name.
	Type string
	// System is the agent's actor system, and Registry its registry.
	System   *actor.ActorSystem
	Registry *registry.Registry
	// Logger is the agent's logger, named after the type.
	Logger hclog.Logger
	// ResyncInterval and HealthInterval are the agent's settings for its
	// own managers (Config.ResyncInterval and Config.FingerprintInterval).
	ResyncInterval, HealthInterval time.Duration
	// Metrics counts into the agent's metrics, labelled by plugin type and
	// name as the built-in types are. Give it to plugintype.Config.Metrics
	// for the restarts and give-ups; report health with PluginHealth.
	Metrics TypeMetrics
}

// TypeMetrics counts what a manager's supervision decides, and follows
// each current plugin's health: plugvisor_instance_restarts_total,
// plugvisor_instance_give_ups_total and plugvisor_plugin_healthy.
type TypeMetrics interface {
	InstanceRestarting(plugin *messages.PluginInfo)
	InstanceGaveUp(plugin *messages.PluginInfo)
	PluginHealth(ptype, name string, healthy bool)
}

// InstanceHealth is the latest health of one plugin's current instance.
type InstanceHealth struct {
	Name        string
	Healthy     bool
	Description string
}

// BuiltInTypes are the plugin types the agent serves or discovers itself;
// a PluginType may not take one of their names.
var BuiltInTypes = []string{csi.TypeController, csi.TypeNode, discovery.TypeDockerVolume, discovery.TypeDockerNetwork,
	discovery.TypeDockerIPAM, discovery.TypeDockerAuthz, discovery.TypeDockerLog, discovery.TypeDockerMetrics}

// validatePluginTypes reports every problem with types, each naming its field.
func validatePluginTypes(types []PluginType) error {
	var problems []error
	seen := map[string]int{}
	for i, t := range types {
		field := fmt.Sprintf("PluginTypes[%d]", i)
		if err := names.Check(field+".Name", t.Name); err != nil {
			problems = append(problems, fmt.Errorf("%w: %w", ErrInvalidConfig, err))
		}
		if slices.Contains(BuiltInTypes, t.Name) {
			problems = append(problems, fmt.Errorf("%w: %s.Name %q is a built-in plugin type; give the type a name of its own",
				ErrInvalidConfig, field, t.Name))
		}
		if j, ok := seen[t.Name]; ok {
			problems = append(problems, fmt.Errorf("%w: %s.Name %q is PluginTypes[%d] already; add each type once",
				ErrInvalidConfig, field, t.Name, j))
		} else {
			seen[t.Name] = i
		}
		if t.Manager == nil {
			problems = append(problems, fmt.Errorf("%w: %s.Manager is nil; give the type's manager", ErrInvalidConfig, field))
		}
	}
	return errors.Join(problems...)
}

// startPluginTypes starts the embedder's types in order; each stops before
// those started earlier, and before the agent's own managers.
func (a *Agent) startPluginTypes() error {
	for _, t := range a.cfg.PluginTypes {
		err := t.Manager.Start(TypeEnv{Type: t.Name, System: a.system, Registry: a.registry, Logger: a.log.Named(t.Name),
			ResyncInterval: a.cfg.ResyncInterval, HealthInterval: a.cfg.FingerprintInterval, Metrics: csiMetrics{a.metrics}})
		if err != nil {
			return fmt.Errorf("plugin type %q: %w", t.Name, err)
		}
		name, stop := t.Name, t.Manager.Shutdown
		a.stops = append(a.stops, func(ctx context.Context) error {
			if err := stop(ctx); err != nil {
				return fmt.Errorf("plugin type %q: %w", name, err)
			}
			return nil
		})
	}
	return nil
}
