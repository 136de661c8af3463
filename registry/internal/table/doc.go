// Package table is the registry's state as plain data: the allocations of
// each plugin type, and the tables that hold them.
//
// An Allocation is one registered copy of a plugin, copied whole from the
// caller's PluginInfo (Copy, NewAllocation). A Table holds the allocations
// of one plugin type: a sorted slice while it is small, two copy-on-write
// B-trees past that, and beside them the names changed since their last
// merge into the trees. Working is the registry actor's working state, one
// Table per type. Working.Cut freezes the changed tables into Types, which
// a snapshot holds and readers share.
//
// Nothing here is safe for concurrent writes. The registry actor is the
// only writer. A frozen Table may be read by any number of goroutines.
package table
