package volumes

import (
	"fmt"
	"slices"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
)

// usage is how o means to use its volume: read-only or not, and the
// capability it chooses.
func (o *op) usage() csi.Usage {
	return csi.Usage{ReadOnly: o.readOnly, AccessMode: o.access, AttachmentMode: o.attachment}
}

// choose returns the one capability of v that fits the modes use names,
// and false when none or several do (the catalog's claim then refuses,
// naming them, before any RPC).
func choose(v *model.CSIVolume, use csi.Usage) (model.RequestedCapability, bool) {
	var fit []model.RequestedCapability
	for _, c := range v.Capabilities() {
		if (use.AccessMode == "" || use.AccessMode == c.AccessMode) && (use.AttachmentMode == "" || use.AttachmentMode == c.AttachmentMode) {
			fit = append(fit, c)
		}
	}
	if len(fit) != 1 {
		return model.RequestedCapability{AccessMode: v.AccessMode, AttachmentMode: v.AttachmentMode}, false
	}
	return fit[0], true
}

// fsType is the file system of v's capability of the given modes: the
// capability's own, else the volume's.
func fsType(v *model.CSIVolume, access, attachment string) string {
	caps := v.Capabilities()
	i := slices.IndexFunc(caps, func(c model.RequestedCapability) bool {
		return string(c.AccessMode) == access && string(c.AttachmentMode) == attachment
	})
	if i >= 0 && caps[i].FSType != "" {
		return caps[i].FSType
	}
	if v.MountOptions != nil {
		return v.MountOptions.FSType
	}
	return ""
}

// adoptAs is adopt for a mount that uses the volume as use says: a record
// that holds nothing takes the capability use chooses (stage and publish
// send it), and one that holds the volume on this node refuses a mount that
// chooses another (ErrInUse): the volume is staged one way at a time.
func (j *job) adoptAs(vol *model.CSIVolume, use csi.Usage) error {
	fresh := holdsNothing(j.rec)
	if err := j.adopt(vol); err != nil {
		return err
	}
	chosen, ok := choose(vol, use)
	if fresh {
		j.rec.AccessMode, j.rec.AttachmentMode = string(chosen.AccessMode), string(chosen.AttachmentMode)
		return nil
	}
	if ok && (string(chosen.AccessMode) != j.rec.GetAccessMode() || string(chosen.AttachmentMode) != j.rec.GetAttachmentMode()) {
		return fmt.Errorf("%w: volume %s is used on this node as %s %s; a mount as %s %s waits until its allocs %v unmount",
			ErrInUse, j.key, j.rec.GetAttachmentMode(), j.rec.GetAccessMode(), chosen.AttachmentMode, chosen.AccessMode, publishedAllocs(j.rec))
	}
	return nil
}
