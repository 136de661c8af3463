package api

import (
	"context"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/controller"
	"github.com/plugvisor/plugvisor/csi/volumes"
	dockervolumes "github.com/plugvisor/plugvisor/dockervolume/volumes"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
)

// The parts of the agent the API serves, each as the API uses it. The
// agent's own parts satisfy them as they are: *registry.Registry,
// *catalog.Catalog, *volumes.Manager, *controller.Controller and
// *dockervolumes.Service (see the assertions in agent/listen.go, where the API is wired). A test
// may give fakes.

// Registry is the plugin registry: /v1/plugins and /v1/events.
type Registry interface {
	RegisterPlugin(info *messages.PluginInfo) error
	DeregisterPlugin(ptype, name, allocID string) error
	ListPlugins(ptype string) []*messages.PluginInfo
	Snapshot() *registry.Snapshot
	Subscribe(ctx context.Context, ptype string, opts registry.SubscribeOptions) (*registry.Subscription, error)
}

// Catalog is the CSI catalog: volumes, claims and plugins.
type Catalog interface {
	GetVolume(ctx context.Context, namespace, id string) (*model.CSIVolume, error)
	RegisterVolume(ctx context.Context, v *model.CSIVolume) (*model.CSIVolume, error)
	RegisterVolumes(ctx context.Context, vs []*model.CSIVolume) ([]*model.CSIVolume, error)
	DeregisterVolume(ctx context.Context, namespace, id string) error
	DeregisterVolumes(ctx context.Context, namespace string, ids []string) error
	ListPluginVolumes(ctx context.Context, namespace, plugin string) ([]*model.CSIVolumeStub, error)
	CheckTopologyRequired(v *model.CSIVolume, withRequirements bool) error
	Plugins(ctx context.Context) ([]*model.CSIPlugin, error)
	ExpectPlugin(ctx context.Context, id string, nodes, controllers int) (*model.CSIPlugin, error)
}

// VolumeManager is this node's volume manager: claims, mounts and detaches.
// ClaimVolume and ReleaseVolume return the volume as the change left it,
// never nil without an error; a volume that does not exist is an error
// wrapping model.ErrVolumeNotFound.
type VolumeManager interface {
	ClaimVolume(ctx context.Context, namespace, id, alloc string, use csi.Usage) (*model.CSIVolume, error)
	ReleaseVolume(ctx context.Context, namespace, id, alloc string) (*model.CSIVolume, error)
	MountWithGroup(ctx context.Context, namespace, id, alloc string, use csi.Usage, group string) (volumes.MountResult, error)
	Unmount(ctx context.Context, namespace, id, alloc string) error
	ForceUnmount(ctx context.Context, namespace, id, alloc string) error
	Detach(ctx context.Context, namespace, id, nodeID string) error
	Status(ctx context.Context, namespace, id string) (volumes.Status, error)
}

// Controller runs the operations of the plugins' controllers.
type Controller interface {
	Create(ctx context.Context, req controller.CreateRequest) (*model.CSIVolume, error)
	Delete(ctx context.Context, namespace, id string) error
	Expand(ctx context.Context, namespace, id string, requiredBytes, limitBytes int64) (controller.ExpandResult, error)
	Modify(ctx context.Context, namespace, id string, params map[string]string) (*model.CSIVolume, error)
	ValidateCapabilities(ctx context.Context, v *model.CSIVolume) error
	CreateSnapshot(ctx context.Context, req controller.SnapshotRequest) (controller.Snapshot, error)
	DeleteSnapshot(ctx context.Context, pluginID, snapshotID string, secrets map[string]string) error
	ListSnapshots(ctx context.Context, req controller.ListSnapshotsRequest) ([]controller.Snapshot, error)
	Capacity(ctx context.Context, req controller.CapacityRequest) (controller.CapacityResult, error)
}

// DockerVolumes is the Docker volume service: /v1/docker/volumes.
type DockerVolumes interface {
	Create(ctx context.Context, name, driver string, opts map[string]string) (dockervolumes.Volume, error)
	Inspect(ctx context.Context, name string) (dockervolumes.Volume, error)
	List(ctx context.Context) (dockervolumes.List, error)
	Remove(ctx context.Context, name string) error
	ForceRemove(ctx context.Context, name string) error
	Mount(ctx context.Context, name, id string) (string, error)
	Unmount(ctx context.Context, name, id string) error
	Path(ctx context.Context, name string) (string, error)
}
