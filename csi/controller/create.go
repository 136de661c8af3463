package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/names"
	"github.com/plugvisor/plugvisor/registry"
)

// CreateRequest asks a plugin's controller for a new volume, to be
// registered in the catalog as (Namespace, ID).
type CreateRequest struct {
	// Namespace and ID name the catalog volume; an empty namespace is the
	// default one.
	Namespace, ID string
	// PluginID is the CSI plugin whose controller creates the volume.
	PluginID string
	// Name is the name CreateVolume gets, which makes it idempotent;
	// empty means ID.
	Name string
	// RequiredBytes and LimitBytes are the capacity range; zero means
	// unset. LimitBytes, when set, is at least RequiredBytes.
	RequiredBytes, LimitBytes int64
	// Parameters are the plugin's opaque creation parameters.
	Parameters map[string]string
	// Secrets go to the plugin with CreateVolume and are kept (durably, and
	// never shown) for the volume's later RPCs.
	Secrets map[string]string
	// AccessMode and AttachmentMode are the volume's modes; MountOptions
	// its fs type and mount flags (file-system volumes only).
	AccessMode     model.AccessMode
	AttachmentMode model.AttachmentMode
	MountOptions   *model.MountOptions
	// Requisite and Preferred are the accessibility requirements.
	Requisite, Preferred []*model.Topology
	// SnapshotID, when set, is the snapshot the volume is made from.
	SnapshotID string
	// CloneFrom, when set, is the catalog volume (of the same namespace
	// and plugin) the volume is cloned from; not with SnapshotID.
	CloneFrom string
}

// Validate reports every problem of r at once, each matching
// ErrInvalidRequest and naming its field as the API spells it.
func (r CreateRequest) Validate() error {
	var problems []string
	checkVolumeKey(r.Namespace, r.ID, &problems)
	if err := registry.ValidateID("plugin_id", r.PluginID); err != nil {
		problems = append(problems, err.Error())
	}
	if r.Name != "" {
		if err := registry.ValidateID("name", r.Name); err != nil {
			problems = append(problems, err.Error())
		}
	}
	problems = append(problems, checkRange(r.RequiredBytes, r.LimitBytes)...)
	if err := r.AccessMode.Validate(); err != nil {
		problems = append(problems, "access_mode: "+err.Error())
	}
	if err := r.AttachmentMode.Validate(); err != nil {
		problems = append(problems, "attachment_mode: "+err.Error())
	}
	for field, m := range map[string]map[string]string{"parameters": r.Parameters, "secrets": r.Secrets} {
		if _, ok := m[""]; ok {
			problems = append(problems, field+" has an empty key")
		}
	}
	for field, ts := range map[string][]*model.Topology{"topology.requisite": r.Requisite, "topology.preferred": r.Preferred} {
		for i, t := range ts {
			if t == nil || len(t.Segments) == 0 {
				problems = append(problems, fmt.Sprintf("%s[%d] has no segments", field, i))
				continue
			}
			for _, k := range slices.Sorted(maps.Keys(t.Segments)) {
				if err := names.CheckKey(fmt.Sprintf("%s[%d] segment", field, i), k); err != nil {
					problems = append(problems, err.Error())
				}
			}
		}
	}
	if r.SnapshotID != "" {
		if id := checkPluginID(r.SnapshotID); id != "" {
			problems = append(problems, "snapshot_id "+id)
		}
	}
	problems = append(problems, r.checkClone()...)
	// The catalog checks the mount options with the rest of the volume;
	// check them here too, so that nothing reaches the plugin.
	if err := r.volume("probe").Validate(); err != nil && len(problems) == 0 {
		problems = append(problems, err.Error())
	}
	slices.Sort(problems)
	return invalid(problems)
}

// checkRange says what is wrong with a capacity range.
func checkRange(required, limit int64) []string {
	var problems []string
	if required < 0 {
		problems = append(problems, fmt.Sprintf("capacity.required_bytes is %d; it must not be negative", required))
	}
	if limit < 0 {
		problems = append(problems, fmt.Sprintf("capacity.limit_bytes is %d; it must not be negative", limit))
	}
	if limit > 0 && required > limit {
		problems = append(problems, fmt.Sprintf("capacity.required_bytes %d is more than capacity.limit_bytes %d", required, limit))
	}
	return problems
}

// checkPluginID says what is wrong with an ID that goes to a plugin, or "".
func checkPluginID(id string) string {
	if id == "" {
		return "must not be empty"
	}
	if err := model.ValidateExternalID(id); err != nil {
		return err.Error()
	}
	return ""
}

// name is the CreateVolume name.
func (r CreateRequest) name() string {
	if r.Name != "" {
		return r.Name
	}
	return r.ID
}

// volume is the catalog volume r describes, before the plugin has spoken.
func (r CreateRequest) volume(externalID string) *model.CSIVolume {
	v := model.NewCSIVolume(r.ID, 0)
	if r.Namespace != "" {
		v.Namespace = r.Namespace
	}
	v.PluginID, v.AccessMode, v.AttachmentMode = r.PluginID, r.AccessMode, r.AttachmentMode
	v.ExternalID, v.Created = externalID, true
	v.Parameters, v.Secrets = maps.Clone(r.Parameters), maps.Clone(r.Secrets)
	v.MountOptions = r.MountOptions.Copy()
	v.RequestedTopologies = append(model.TopologiesFromCSI(model.TopologiesToCSI(r.Requisite)),
		model.TopologiesFromCSI(model.TopologiesToCSI(r.Preferred))...)
	return v
}

// topologyChecker is a Catalog that refuses, before any RPC, a volume
// without a topology of a plugin that advertises
// VOLUME_ACCESSIBILITY_CONSTRAINTS (*catalog.Catalog is one).
type topologyChecker interface {
	CheckTopologyRequired(v *model.CSIVolume, withRequirements bool) error
}

// Create creates a volume with the plugin's controller (CreateVolume, which
// needs CREATE_DELETE_VOLUME, and CREATE_DELETE_SNAPSHOT for a snapshot
// source) and registers it in the catalog with the plugin's volume ID,
// capacity, context and accessible topology, and the request's parameters,
// secrets, mount options and requirements. It returns the registered volume.
//
// A create from a snapshot or a clone that asks for no size takes its
// source's, and one that asks for less is refused with ErrInvalidRequest
// before CreateVolume (see fitSource).
//
// CreateVolume is idempotent by name, so a create that failed after the
// plugin made the volume (a crash, a catalog that refused) is finished by
// running the same create again. A name whose plugin volume already lives
// in another catalog volume (another namespace) is refused by the catalog
// with model.ErrVolumeConflict naming it; the plugin volume is left alone.
// A catalog volume that exists with another plugin or other modes, or that
// was registered rather than created, is refused with ErrVolumeExists
// before any RPC, and so is a new volume beyond the catalog's limit (with
// model.ErrVolumeLimit), and one without requisite or preferred topology
// of a plugin that advertises VOLUME_ACCESSIBILITY_CONSTRAINTS (with
// model.ErrTopologyRequired).
func (c *Controller) Create(ctx context.Context, req CreateRequest) (*model.CSIVolume, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := c.operation(ctx)
	defer cancel()
	what := fmt.Sprintf("%s/%s", nsOrDefault(req.Namespace), req.ID)
	if err := c.checkNotOtherVolume(ctx, what, req); err != nil {
		return nil, err
	}
	if err := c.cfg.Catalog.CheckRoom(req.Namespace, req.ID); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if tc, ok := c.cfg.Catalog.(topologyChecker); ok {
		if err := tc.CheckTopologyRequired(req.volume(""), len(req.Requisite)+len(req.Preferred) > 0); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
	}
	need := []capability{capCreateDelete}
	if req.SnapshotID != "" {
		need = append(need, capSnapshots)
	}
	source, err := c.cloneSource(ctx, what, req)
	if err != nil {
		return nil, err
	}
	if source != nil {
		need = append(need, capClone)
	}
	client, err := c.connect(ctx, req.PluginID, what, need...)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	if req, err = c.fitSource(ctx, client, req, source); err != nil {
		return nil, err
	}
	cvr := c.createVolumeRequest(req)
	if source != nil {
		cvr.VolumeContentSource = &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Volume{
			Volume: &csipb.VolumeContentSource_VolumeSource{VolumeId: source.PluginVolumeID()}}}
	}
	resp, err := client.CreateVolume(ctx, cvr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	pv := resp.GetVolume()
	v := req.volume(pv.GetVolumeId())
	v.CapacityBytes, v.Context = pv.GetCapacityBytes(), maps.Clone(pv.GetVolumeContext())
	v.Topologies = model.TopologiesFromCSI(pv.GetAccessibleTopology())
	if pv.GetVolumeId() == "" || v.CapacityBytes < 0 {
		return nil, fmt.Errorf("%s: CreateVolume: %w: volume ID %q, capacity %d bytes",
			what, csi.ErrInvalidResponse, pv.GetVolumeId(), v.CapacityBytes)
	}
	got, err := c.cfg.Catalog.RegisterVolume(ctx, v)
	switch {
	case errors.Is(err, model.ErrVolumeConflict):
		// The plugin names a volume by the request's name, the volume ID
		// unless one is given: the same ID in another namespace is the
		// same plugin volume, which another catalog volume holds, and the
		// plugin answered with it. It is that volume's data: nothing here
		// may invite anyone to delete it.
		return nil, fmt.Errorf("%s: CreateVolume %q answered with a volume another catalog volume holds; nothing was created or changed: %w.\n"+
			"The plugin names its volumes by \"name\", the volume ID when none is sent: choose another volume ID, or send another \"name\"",
			what, cvr.GetName(), err)
	case err != nil:
		return nil, fmt.Errorf("%s: the plugin made volume %q, but the catalog did not register it (run the same create again to finish, or delete the plugin volume): %w",
			what, pv.GetVolumeId(), err)
	}
	c.log.Info("volume created", "namespace", got.Namespace, "volume_id", got.ID, "plugin", got.PluginID,
		"external_id", got.ExternalID, "capacity_bytes", got.CapacityBytes)
	return got, nil
}

// checkNotOtherVolume refuses a create whose catalog volume exists as
// something else, or is being deleted.
func (c *Controller) checkNotOtherVolume(ctx context.Context, what string, req CreateRequest) error {
	old, err := c.cfg.Catalog.GetVolume(ctx, req.Namespace, req.ID)
	switch {
	case errors.Is(err, model.ErrVolumeNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("%s: %w", what, err)
	case old.Deleting:
		return fmt.Errorf("%s: %w: it is being deleted; run the delete again to finish it first", what, model.ErrVolumeDeleting)
	case !old.Created || old.PluginID != req.PluginID || old.AccessMode != req.AccessMode || old.AttachmentMode != req.AttachmentMode:
		return fmt.Errorf("%s: %w: the catalog holds it as plugin %q volume %q (%s, %s, created: %t); delete or deregister it, or choose another ID",
			what, ErrVolumeExists, old.PluginID, old.PluginVolumeID(), old.AccessMode, old.AttachmentMode, old.Created)
	}
	return nil
}

// createVolumeRequest is the CreateVolume request of req.
func (c *Controller) createVolumeRequest(req CreateRequest) *csipb.CreateVolumeRequest {
	out := &csipb.CreateVolumeRequest{
		Name:               req.name(),
		Parameters:         maps.Clone(req.Parameters),
		Secrets:            maps.Clone(req.Secrets),
		VolumeCapabilities: []*csipb.VolumeCapability{model.VolumeCapability(req.AccessMode, req.AttachmentMode, req.MountOptions)},
	}
	if req.RequiredBytes > 0 || req.LimitBytes > 0 {
		out.CapacityRange = &csipb.CapacityRange{RequiredBytes: req.RequiredBytes, LimitBytes: req.LimitBytes}
	}
	if len(req.Requisite) > 0 || len(req.Preferred) > 0 {
		out.AccessibilityRequirements = &csipb.TopologyRequirement{
			Requisite: model.TopologiesToCSI(req.Requisite),
			Preferred: model.TopologiesToCSI(req.Preferred),
		}
	}
	if req.SnapshotID != "" {
		out.VolumeContentSource = &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{
			Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: req.SnapshotID},
		}}
	}
	return out
}

func nsOrDefault(namespace string) string {
	if namespace == "" {
		return model.DefaultNamespace
	}
	return namespace
}
