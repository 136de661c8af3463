package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/registry"
)

// maxSnapshotPages bounds how many pages ListSnapshots follows, so that a
// plugin whose next_token never ends cannot keep an operation alive.
const maxSnapshotPages = 1000

// Snapshot is a plugin's snapshot of a volume. Snapshots live on the
// plugin: the catalog does not keep them.
type Snapshot struct {
	// PluginID is the plugin that holds the snapshot.
	PluginID string
	// ID is the plugin's snapshot ID, the one to create volumes from.
	ID string
	// SourceVolumeID is the plugin's ID of the snapshotted volume.
	SourceVolumeID string
	SizeBytes      int64
	CreationTime   time.Time
	ReadyToUse     bool
}

func snapshotFrom(plugin string, s *csipb.Snapshot) Snapshot {
	out := Snapshot{PluginID: plugin, ID: s.GetSnapshotId(), SourceVolumeID: s.GetSourceVolumeId(),
		SizeBytes: s.GetSizeBytes(), ReadyToUse: s.GetReadyToUse()}
	if s.GetCreationTime() != nil {
		out.CreationTime = s.GetCreationTime().AsTime()
	}
	return out
}

// SnapshotRequest asks for a snapshot of the catalog volume (Namespace, VolumeID).
type SnapshotRequest struct {
	Namespace, VolumeID string
	// Name makes CreateSnapshot idempotent: the same name again returns
	// the same snapshot. Required.
	Name       string
	Parameters map[string]string
	// Secrets go to the plugin with CreateSnapshot; nil means the
	// volume's own secrets.
	Secrets map[string]string
}

// CreateSnapshot snapshots a volume with CreateSnapshot, which the plugin
// must advertise (CREATE_DELETE_SNAPSHOT).
func (c *Controller) CreateSnapshot(ctx context.Context, req SnapshotRequest) (Snapshot, error) {
	var problems []string
	checkVolumeKey(req.Namespace, req.VolumeID, &problems)
	if err := registry.ValidateID("name", req.Name); err != nil {
		problems = append(problems, err.Error()+" (CreateSnapshot is idempotent by name)")
	}
	for field, m := range map[string]map[string]string{"parameters": req.Parameters, "secrets": req.Secrets} {
		if _, ok := m[""]; ok {
			problems = append(problems, field+" has an empty key")
		}
	}
	if err := invalid(problems); err != nil {
		return Snapshot{}, err
	}
	ctx, cancel := c.operation(ctx)
	defer cancel()
	what := fmt.Sprintf("snapshot %q of %s/%s", req.Name, nsOrDefault(req.Namespace), req.VolumeID)
	v, err := c.cfg.Catalog.GetVolume(ctx, req.Namespace, req.VolumeID)
	if err != nil {
		return Snapshot{}, fmt.Errorf("%s: %w", what, err)
	}
	client, err := c.connect(ctx, v.PluginID, what, capSnapshots)
	if err != nil {
		return Snapshot{}, err
	}
	defer client.Close()
	secrets := req.Secrets
	if secrets == nil {
		secrets = v.Secrets
	}
	resp, err := client.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{
		SourceVolumeId: v.PluginVolumeID(), Name: req.Name, Parameters: maps.Clone(req.Parameters), Secrets: maps.Clone(secrets),
	})
	if err != nil {
		return Snapshot{}, fmt.Errorf("%s: %w", what, err)
	}
	s := snapshotFrom(v.PluginID, resp.GetSnapshot())
	if s.ID == "" {
		return Snapshot{}, fmt.Errorf("%s: CreateSnapshot: %w: no snapshot ID", what, csi.ErrInvalidResponse)
	}
	c.log.Info("snapshot created", "plugin", v.PluginID, "snapshot_id", s.ID, "namespace", v.Namespace, "volume_id", v.ID)
	return s, nil
}

// DeleteSnapshot deletes a plugin's snapshot with DeleteSnapshot, which the
// plugin must advertise (CREATE_DELETE_SNAPSHOT). A snapshot the plugin does
// not know counts as deleted.
func (c *Controller) DeleteSnapshot(ctx context.Context, pluginID, snapshotID string, secrets map[string]string) error {
	var problems []string
	if err := registry.ValidateID("plugin_id", pluginID); err != nil {
		problems = append(problems, err.Error())
	}
	if p := checkPluginID(snapshotID); p != "" {
		problems = append(problems, "snapshot_id "+p)
	}
	if err := invalid(problems); err != nil {
		return err
	}
	ctx, cancel := c.operation(ctx)
	defer cancel()
	what := fmt.Sprintf("snapshot %q of plugin %q", snapshotID, pluginID)
	client, err := c.connect(ctx, pluginID, what, capSnapshots)
	if err != nil {
		return err
	}
	defer client.Close()
	_, err = client.DeleteSnapshot(ctx, &csipb.DeleteSnapshotRequest{SnapshotId: snapshotID, Secrets: maps.Clone(secrets)})
	if err != nil && !errors.Is(err, csi.ErrNotFound) {
		return fmt.Errorf("%s: %w", what, err)
	}
	c.log.Info("snapshot deleted", "plugin", pluginID, "snapshot_id", snapshotID)
	return nil
}

// ListSnapshotsRequest selects snapshots: those of a plugin, of a catalog
// volume (whose plugin is then used), or one snapshot by ID.
type ListSnapshotsRequest struct {
	// PluginID is the plugin to ask; it may be left empty when VolumeID is set.
	PluginID string
	// Namespace and VolumeID, when VolumeID is set, keep the snapshots of
	// that catalog volume.
	Namespace, VolumeID string
	// SnapshotID, when set, keeps that snapshot.
	SnapshotID string
}

// ListSnapshots lists a plugin's snapshots with ListSnapshots, which the
// plugin must advertise (LIST_SNAPSHOTS), following every page.
func (c *Controller) ListSnapshots(ctx context.Context, req ListSnapshotsRequest) ([]Snapshot, error) {
	var problems []string
	if req.VolumeID != "" || req.Namespace != "" {
		checkVolumeKey(req.Namespace, req.VolumeID, &problems)
	}
	if req.PluginID != "" || req.VolumeID == "" {
		if err := registry.ValidateID("plugin_id", req.PluginID); err != nil {
			problems = append(problems, err.Error()+" (or give volume_id)")
		}
	}
	if req.SnapshotID != "" {
		if p := checkPluginID(req.SnapshotID); p != "" {
			problems = append(problems, "snapshot_id "+p)
		}
	}
	if err := invalid(problems); err != nil {
		return nil, err
	}
	ctx, cancel := c.operation(ctx)
	defer cancel()
	plugin, what, rpc := req.PluginID, fmt.Sprintf("snapshots of plugin %q", req.PluginID), &csipb.ListSnapshotsRequest{SnapshotId: req.SnapshotID}
	if req.VolumeID != "" {
		what = fmt.Sprintf("snapshots of %s/%s", nsOrDefault(req.Namespace), req.VolumeID)
		v, err := c.cfg.Catalog.GetVolume(ctx, req.Namespace, req.VolumeID)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		if plugin != "" && plugin != v.PluginID {
			return nil, invalid([]string{fmt.Sprintf("plugin_id %q is not the plugin of volume %s/%s (%q)", plugin, v.Namespace, v.ID, v.PluginID)})
		}
		plugin, rpc.SourceVolumeId = v.PluginID, v.PluginVolumeID()
	}
	client, err := c.connect(ctx, plugin, what, capList)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	out := []Snapshot{}
	for range maxSnapshotPages {
		resp, err := client.ListSnapshots(ctx, rpc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		for _, e := range resp.GetEntries() {
			out = append(out, snapshotFrom(plugin, e.GetSnapshot()))
		}
		if rpc.StartingToken = resp.GetNextToken(); rpc.StartingToken == "" {
			return out, nil
		}
	}
	return nil, fmt.Errorf("%s: ListSnapshots: %w: more than %d pages", what, csi.ErrInvalidResponse, maxSnapshotPages)
}
