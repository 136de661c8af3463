package agent

import (
	"github.com/plugvisor/plugvisor/csi/catalog"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/volumes"
)

// The catalog's facade and the fleet are the volume manager's Catalog and
// Attachments as they are.
var (
	_ volumes.Catalog     = (*catalog.Catalog)(nil)
	_ volumes.Attachments = model.Fleet(nil)
)
