package csi

import "github.com/plugvisor/plugvisor/csi/catalog/model"

// Health descriptions that the CSI manager writes into fingerprints and the
// catalog reads back: the catalog tells a stopped instance's final word from
// a live one's by them, without importing the manager.

// HealthyDescription is the health description of a healthy fingerprint.
const HealthyDescription = "healthy"

// StoppedDescription is the health description of the final fingerprint an
// instance reports when it stops (model.CSIInfo.Stopped tells it).
const StoppedDescription = model.StoppedDescription
