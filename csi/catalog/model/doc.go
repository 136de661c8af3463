// Package model is the model of the CSI catalog: volumes with their claims,
// plugins with their per-node fingerprints and health counts, and the rules
// that tie them together (which claims an access mode allows, when a volume is
// schedulable). The catalog's rules for one volume (RegisterOver, ClaimOn,
// AttachOn, …) are pure functions here too, so that the catalog actor and
// a Fleet decide alike and refuse with the same sentinels.
//
// It is plain data with methods and no concurrency of its own: the catalog
// actor owns one copy of it and is the only one to mutate it. Every method that
// refuses its input returns an error matching one of the Err sentinels with
// errors.Is and leaves the receiver unchanged.
//
// The model keeps Nomad's semantics (nomad/structs/csi.go) where they are
// sound, and departs from them where they are not: topologies compare as sets
// both ways, an alloc cannot silently switch its claim between read and write,
// single-node access modes are enforced per node, and plugin health counts are
// kept exact through every replacement and deletion.
package model
