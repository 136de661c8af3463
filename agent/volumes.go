package agent

import (
	"context"
	"errors"
	"fmt"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/errclass"
)

// volumeCatalog is the catalog's facade as the volume manager's Catalog,
// which it satisfies: it only adds the volume manager's sentinels to the
// catalog's errors (catalogError).
type volumeCatalog struct{ c volumes.Catalog }

func (v volumeCatalog) GetVolume(ctx context.Context, namespace, id string) (*model.CSIVolume, error) {
	vol, err := v.c.GetVolume(ctx, namespace, id)
	return vol, catalogError(err)
}

func (v volumeCatalog) Claim(ctx context.Context, req csi.ClaimRequest) error {
	return catalogError(v.c.Claim(ctx, req))
}

func (v volumeCatalog) ReleaseClaim(ctx context.Context, namespace, id string, c *model.Claim) error {
	return catalogError(v.c.ReleaseClaim(ctx, namespace, id, c))
}

// volumeAttachments is the fleet as the volume manager's Attachments,
// which it satisfies: it only adds the volume manager's sentinels to the
// fleet's errors.
type volumeAttachments struct{ f volumes.Attachments }

func (v volumeAttachments) GetVolume(ctx context.Context, namespace, id string) (*model.CSIVolume, error) {
	vol, err := v.f.GetVolume(ctx, namespace, id)
	return vol, catalogError(err)
}

func (v volumeAttachments) Attach(ctx context.Context, namespace, id string, a *model.Attachment) (*model.CSIVolume, error) {
	vol, err := v.f.Attach(ctx, namespace, id, a)
	return vol, catalogError(err)
}

func (v volumeAttachments) Detach(ctx context.Context, namespace, id, node string) (*model.CSIVolume, error) {
	vol, err := v.f.Detach(ctx, namespace, id, node)
	return vol, catalogError(err)
}

func (v volumeAttachments) MarkDetaching(ctx context.Context, namespace, id, node string) (*model.CSIVolume, error) {
	vol, err := v.f.MarkDetaching(ctx, namespace, id, node)
	if errors.Is(err, catalog.ErrVolumeInUse) {
		return nil, fmt.Errorf("%w: %w", volumes.ErrInUse, err)
	}
	return vol, catalogError(err)
}

// catalogError adds the volume manager's sentinel to a catalog error,
// whose text already says what happened.
func catalogError(err error) error {
	switch {
	case errors.Is(err, catalog.ErrVolumeNotFound):
		return errclass.Also(err, volumes.ErrVolumeNotFound)
	case errors.Is(err, csi.ErrClaimRefused), errors.Is(err, catalog.ErrVolumeInUse), errors.Is(err, catalog.ErrVolumeDeleting):
		return errclass.Also(err, volumes.ErrClaimRefused)
	case errors.Is(err, catalog.ErrInvalid):
		return errclass.Also(err, volumes.ErrInvalid)
	}
	return err
}

// VolumeCatalog is the catalog c as the volume manager's Catalog, as the
// agent wires them: for embedders and tests that start the parts
// themselves.
func VolumeCatalog(c *catalog.Catalog) volumes.Catalog { return volumeCatalog{c} }

// VolumeAttachments is the fleet f as the volume manager's Attachments, as
// the agent wires them in cluster mode.
func VolumeAttachments(f catalog.Fleet) volumes.Attachments { return volumeAttachments{f} }

// volumeAttachments is the volume manager's Attachments: the fleet's, in
// cluster mode; none on a single node.
func (a *Agent) volumeAttachments() volumes.Attachments {
	if f := a.fleet(); f != nil {
		return VolumeAttachments(f)
	}
	return nil
}

// The catalog's facade and the fleet satisfy the volume manager's
// interfaces as they are.
var (
	_ volumes.Catalog     = (*catalog.Catalog)(nil)
	_ volumes.Attachments = catalog.Fleet(nil)
)
