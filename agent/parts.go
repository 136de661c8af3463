package agent

import (
	"context"
	"path/filepath"

	"github.com/plugvisor/plugvisor/csi/catalog"
	"github.com/plugvisor/plugvisor/csi/controller"
	"github.com/plugvisor/plugvisor/csi/manager"
	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/discovery"
	"github.com/plugvisor/plugvisor/dockervolume"
	dockervolumes "github.com/plugvisor/plugvisor/dockervolume/volumes"
	"github.com/plugvisor/plugvisor/registry"
)

// startRegistry starts the registry on the store.
func (a *Agent) startRegistry() error {
	bucket, err := a.store.Bucket(registry.BucketName)
	if err != nil {
		return err
	}
	a.registry, err = registry.New(a.system, registry.Config{
		Bucket:  bucket,
		Logger:  a.log,
		Metrics: registryMetrics{m: a.metrics, store: &a.storeHealth},
		Limits: registry.Limits{PluginsPerType: a.cfg.MaxPluginsPerType, OptionsBytes: a.cfg.MaxPluginOptionsBytes,
			Subscribers: a.cfg.MaxSubscribers},
	})
	if err != nil {
		return err
	}
	a.stops = append(a.stops, func(context.Context) error { return a.registry.Shutdown() })
	return nil
}

// startManagers starts the plugin-type managers (one supervised instance
// actor per plugin, fed by the registry), the CSI catalog fed by the CSI
// manager's fingerprints, the volume manager that claims through the
// catalog, and the controller operations. Their stops run in reverse:
// volumes, then the CSI manager's instances (whose final fingerprints
// reach the catalog), then the catalog, then the CSI manager actor it
// subscribed to, then Docker's.
func (a *Agent) startManagers() error {
	for _, start := range []func() error{a.startDockerManager, a.startCSI, a.startVolumeManager, a.startController} {
		if err := start(); err != nil {
			return err
		}
	}
	return nil
}

// startDockerManager starts the Docker volume plugin type's manager.
func (a *Agent) startDockerManager() error {
	docker, err := dockervolume.Start(a.system, dockervolume.Config{
		Registry:       a.registry,
		Logger:         a.log,
		ResyncInterval: a.cfg.ResyncInterval,
		HealthInterval: a.cfg.FingerprintInterval,
		Metrics:        csiMetrics{a.metrics},
	})
	if err != nil {
		return err
	}
	a.docker = docker
	a.stops = append(a.stops, func(context.Context) error { return docker.Shutdown() })
	return nil
}

// startCSI starts the CSI manager and the catalog that takes its
// fingerprints.
func (a *Agent) startCSI() error {
	var err error
	a.csi, err = manager.Start(a.system, manager.Config{
		Registry:       a.registry,
		Logger:         a.log,
		ResyncInterval: a.cfg.ResyncInterval,
		Fingerprint:    manager.FingerprintOptions{Interval: a.cfg.FingerprintInterval, Observe: a.metrics.observeFingerprint},
		Metrics:        csiMetrics{a.metrics},
	})
	if err != nil {
		return err
	}
	bucket, err := a.store.Bucket(catalog.Bucket)
	if err != nil {
		return err
	}
	a.catalog, err = catalog.Start(a.system, catalog.Config{
		Bucket: bucket, NodeID: a.cfg.NodeID, Manager: a.csi.PID(), Logger: a.log, MaxVolumes: a.cfg.MaxVolumes,
		Fleet: a.fleet(),
	})
	if err != nil {
		_ = a.csi.Shutdown(context.Background())
		return err
	}
	a.stops = append(a.stops, a.csi.Shutdown, a.catalog.Shutdown, a.csi.StopInstances)
	return nil
}

// startVolumeManager starts the volume manager on the catalog. In cluster
// mode it also starts what follows the fleet: the node's claims, the
// fence, the GC and the compactor.
func (a *Agent) startVolumeManager() error {
	records, err := a.store.Bucket(volumes.Bucket)
	if err != nil {
		return err
	}
	claims := a.followClaims()
	a.volumes, err = volumes.Start(a.system, volumes.Config{
		Bucket:      records,
		Catalog:     a.catalog,
		Attachments: a.fleet(),
		Registry:    a.registry,
		Root:        filepath.Join(a.cfg.DataDir, "csi"),
		Logger:      a.log,
		NodeID:      a.cfg.NodeID,
		OnEvent:     a.onEvent,

		OperationTimeout: a.cfg.VolumeOperationTimeout,
		StatsInterval:    a.cfg.VolumeStatsInterval, StatsSupported: a.nodeSupportsStats,
	})
	if err != nil {
		return err
	}
	a.metrics.reg.MustRegister(newVolumeStatsCollector(a.volumes.VolumeStats))
	a.stops = append(a.stops, a.volumes.Shutdown)
	claims.deliverTo(a.volumes)
	a.followStanding()
	if err := a.startGC(); err != nil {
		return err
	}
	return a.startCompactor()
}

// startController readies the controller operations: create, delete,
// expand and snapshots, finished on the nodes by the volume manager.
func (a *Agent) startController() error {
	cfg := controller.Config{
		Catalog: a.catalog, Plugins: a.registry, NodeExpander: a.volumes,
		OperationTimeout: a.cfg.VolumeOperationTimeout, Logger: a.log,
	}
	var err error
	if a.ctl, err = controller.New(cfg); err != nil || a.member == nil {
		return err
	}
	// Other members' operations run on this node's controller; their node
	// expansions, on their own nodes (see routedController.Expand).
	cfg.NodeExpander = nil
	served, err := controller.New(cfg)
	if err == nil {
		a.member.ServeControllers(servedControllers(served))
	}
	return err
}

// startDockerVolumes starts the Docker volume service on the store, finding
// drivers through discovery (Docker's Get semantics).
func (a *Agent) startDockerVolumes() error {
	bucket, err := a.store.Bucket(dockervolumes.Bucket)
	if err != nil {
		return err
	}
	a.dockerVolumes, err = dockervolumes.Start(a.system, dockervolumes.Config{
		Bucket:  bucket,
		Drivers: dockervolumes.RegistryDrivers{Registry: a.registry, Discovery: a.disc},
		Logger:  a.log,
	})
	if err != nil {
		return err
	}
	a.stops = append(a.stops, func(context.Context) error { return a.dockerVolumes.Shutdown() })
	return nil
}

// startDiscovery watches the plugin directories and registers what it finds.
func (a *Agent) startDiscovery() error {
	dirs := discovery.Dirs{
		Sockets: append([]string{a.PluginDir()}, a.cfg.SocketDirs...),
		Specs:   append([]string{a.SpecDir()}, a.cfg.SpecDirs...),
	}
	if a.cfg.DockerDirs {
		docker := discovery.DockerDirs()
		dirs.Sockets, dirs.Specs = append(dirs.Sockets, docker.Sockets...), append(dirs.Specs, docker.Specs...)
	}
	disc, err := discovery.Start(a.system, discovery.Config{
		Dirs:     dirs,
		Registry: a.registry,
		Logger:   a.log,
		Metrics:  a.metrics,
	})
	if err != nil {
		return err
	}
	a.disc = disc
	a.metrics.reg.MustRegister(newDiscoveredCollector(a.Plugins))
	a.stops = append(a.stops, func(context.Context) error { return disc.Shutdown() })
	return nil
}
