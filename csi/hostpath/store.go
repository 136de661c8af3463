package hostpath

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// On-disk layout under the root:
//
//	volumes/<volume-id>/                   the volume's data
//	snapshots/<snapshot-id>/               a snapshot's data, a copy of its volume's
//	state/volumes/<volume-id>.json         volumeRecord, written by the controller
//	state/snapshots/<snapshot-id>.json     snapshotRecord, written by the controller
//	state/nodes/<node-id>/                 made by a node plugin when it starts: the node exists
//	state/nodes/<node-id>/journal          nodeRecords, appended by that node (see nodeJournal)
//
// A controller record is written to a temporary file and swapped into place,
// so a killed plugin leaves either the old record or the new one. A node
// appends each change of its records to its journal, the changes of volumes
// staged or published at once sharing one sync; a killed plugin loses no
// change it acknowledged. The controller and the nodes write disjoint files,
// so they can run as separate processes on one root; the controller reads a
// node's journal to learn what the node uses. Secrets are never written.

// volumeRecord is what the controller knows of a volume.
type volumeRecord struct {
	ID            string            `json:"id"`
	Name          string            `json:"name"`
	CapacityBytes int64             `json:"capacity_bytes"`
	Parameters    map[string]string `json:"parameters,omitempty"`
	// NodeID is the node whose disk holds the volume (its topology).
	NodeID string `json:"node_id"`
	// SourceSnapshotID is the snapshot the volume was created from, if any.
	SourceSnapshotID string `json:"source_snapshot_id,omitempty"`
	// SourceVolumeID is the volume it was cloned from, if any.
	SourceVolumeID string `json:"source_volume_id,omitempty"`
	// MutableParameters are those of CreateVolume and ControllerModifyVolume.
	MutableParameters map[string]string `json:"mutable_parameters,omitempty"`
	// Attachments are the ControllerPublishVolume calls in force, by node ID
	// (only with Config.AttachRequired).
	Attachments map[string]attachment `json:"attachments,omitempty"`
}

// attachment is one ControllerPublishVolume of a volume to a node.
type attachment struct {
	// ID is a random token made at attach time and handed out in the
	// publish context: a node call carrying an older attachment's ID is stale.
	ID         string                               `json:"id"`
	Readonly   bool                                 `json:"readonly"`
	AccessMode csi.VolumeCapability_AccessMode_Mode `json:"access_mode"`
}

// snapshotRecord is what the controller knows of a snapshot.
type snapshotRecord struct {
	ID             string            `json:"id"`
	Name           string            `json:"name"`
	SourceVolumeID string            `json:"source_volume_id"`
	SizeBytes      int64             `json:"size_bytes"`
	CreatedUnixNs  int64             `json:"created_unix_ns"`
	Parameters     map[string]string `json:"parameters,omitempty"`
}

// nodeRecord is what one node knows of a volume: where it is staged and
// published. It is deleted when the volume is neither.
type nodeRecord struct {
	VolumeID    string `json:"volume_id"`
	StagingPath string `json:"staging_path,omitempty"`
	// StagingMounted says the volume directory is bind-mounted on StagingPath
	// (not when staged with SymlinkFallback and no privilege); it is
	// recorded before the bind mount is made.
	StagingMounted bool                   `json:"staging_mounted,omitempty"`
	Targets        map[string]publication `json:"targets,omitempty"`
	// MountGroup is the volume_mount_group the volume was staged with
	// (applied to the volume root); publications must ask for the same.
	MountGroup string `json:"mount_group,omitempty"`
}

// publication is one NodePublishVolume target.
type publication struct {
	Readonly   bool                                 `json:"readonly"`
	Symlink    bool                                 `json:"symlink"`
	AccessMode csi.VolumeCapability_AccessMode_Mode `json:"access_mode"`
}

// empty reports whether the record holds nothing worth keeping.
func (r *nodeRecord) empty() bool { return r.StagingPath == "" && len(r.Targets) == 0 }

const (
	volumeIDPrefix   = "hp-"
	snapshotIDPrefix = "hps-"
	recordSuffix     = ".json"
	tempPrefix       = ".tmp-"
)

// volumeIDPattern matches the IDs CreateVolume hands out. ListVolumes tokens
// are such IDs; other IDs are accepted everywhere else and simply not found.
var volumeIDPattern = regexp.MustCompile(`^hp-[0-9a-f]{32}$`)

// snapshotIDPattern matches the IDs CreateSnapshot hands out, and so the
// ListSnapshots tokens.
var snapshotIDPattern = regexp.MustCompile(`^hps-[0-9a-f]{32}$`)

// volumeIDFor derives the volume ID from the CO's volume name, so that a
// repeated CreateVolume finds its volume without an index.
func volumeIDFor(name string) string { return idFor(volumeIDPrefix, name) }

// snapshotIDFor derives the snapshot ID from the CO's snapshot name.
func snapshotIDFor(name string) string { return idFor(snapshotIDPrefix, name) }

func idFor(prefix, name string) string {
	sum := sha256.Sum256([]byte(name))
	return prefix + hex.EncodeToString(sum[:16])
}

func (d *Driver) volumesDir() string     { return filepath.Join(d.cfg.Root, "volumes") }
func (d *Driver) volumeStateDir() string { return filepath.Join(d.cfg.Root, "state", "volumes") }
func (d *Driver) nodesStateDir() string  { return filepath.Join(d.cfg.Root, "state", "nodes") }
func (d *Driver) nodeStateDir() string   { return filepath.Join(d.nodesStateDir(), d.cfg.NodeID) }

func (d *Driver) snapshotsDir() string { return filepath.Join(d.cfg.Root, "snapshots") }
func (d *Driver) snapshotStateDir() string {
	return filepath.Join(d.cfg.Root, "state", "snapshots")
}
func (d *Driver) snapshotDir(id string) string { return filepath.Join(d.snapshotsDir(), id) }
func (d *Driver) snapshotFile(id string) string {
	return filepath.Join(d.snapshotStateDir(), id+recordSuffix)
}

func (d *Driver) volumeDir(id string) string { return filepath.Join(d.volumesDir(), id) }
func (d *Driver) volumeFile(id string) string {
	return filepath.Join(d.volumeStateDir(), id+recordSuffix)
}

// loadVolume reads the volume record of id; found is false if there is none.
func (d *Driver) loadVolume(id string) (rec volumeRecord, found bool, err error) {
	found, err = readJSON(d.volumeFile(id), &rec)
	return rec, found, err
}

// loadSnapshot reads the snapshot record of id; found is false if there is none.
func (d *Driver) loadSnapshot(id string) (rec snapshotRecord, found bool, err error) {
	found, err = readJSON(d.snapshotFile(id), &rec)
	return rec, found, err
}

// nodeExists reports whether a node plugin of this ID has started on the root.
func (d *Driver) nodeExists(id string) (bool, error) {
	_, err := os.Stat(filepath.Join(d.nodesStateDir(), id))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("check node %s: %w", id, err)
}

// nodeUses reports whether node stages or publishes volume id.
func (d *Driver) nodeUses(node, id string) (bool, error) {
	if node == d.cfg.NodeID && d.journal != nil {
		rec := d.journal.get(id)
		return !rec.empty(), nil
	}
	recs, err := readNodeRecords(filepath.Join(d.nodesStateDir(), node))
	if err != nil {
		return false, fmt.Errorf("check node %s: %w", node, err)
	}
	_, ok := recs[id]
	return ok, nil
}

// loadNode returns this node's record of volume id, or an empty one.
func (d *Driver) loadNode(id string) (nodeRecord, error) {
	return d.journal.get(id), nil
}

// saveNode makes this node's record of a volume durable, or forgets the
// volume when the record is empty.
func (d *Driver) saveNode(rec nodeRecord) error {
	return d.journal.save(rec)
}

// volumeIDs lists the IDs of all volume records, sorted.
func (d *Driver) volumeIDs() ([]string, error) {
	return recordIDs(d.volumeStateDir())
}

// stagedCount counts the volumes staged on this node.
func (d *Driver) stagedCount() (int64, error) {
	var n int64
	d.journal.all(func(rec nodeRecord) {
		if rec.StagingPath != "" {
			n++
		}
	})
	return n, nil
}

// nodesUsing lists the nodes that still stage or publish volume id.
func (d *Driver) nodesUsing(id string) ([]string, error) {
	entries, err := os.ReadDir(d.nodesStateDir())
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	var nodes []string
	for _, e := range entries {
		uses, err := d.nodeUses(e.Name(), id)
		if err != nil {
			return nil, err
		}
		if uses {
			nodes = append(nodes, e.Name())
		}
	}
	return nodes, nil
}

// recordIDs lists the IDs of the records in dir, sorted, skipping
// temporary files a killed writer may have left.
func recordIDs(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	ids := make([]string, 0, len(entries))
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || strings.HasPrefix(name, tempPrefix) || !strings.HasSuffix(name, recordSuffix) {
			continue
		}
		ids = append(ids, strings.TrimSuffix(name, recordSuffix))
	}
	return ids, nil
}

// readJSON decodes the file at path into v; found is false if it does not exist.
func readJSON(path string, v any) (found bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", path, err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return false, fmt.Errorf("decode %s: %w", path, err)
	}
	return true, nil
}

// writeJSON atomically replaces the file at path with v encoded as JSON:
// it writes and syncs the record's spare file (spareOf), then swaps the
// two names in one step, so that the spare holds the previous content for
// the next write, and syncs the directory (syncDir), so that the swap
// outlives a crash. Replacing a record so allocates no inode and frees
// none, which on a busy file system costs more than the write itself;
// where the swap is not supported, the spare is renamed over the record.
func writeJSON(path string, v any) (err error) {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	spare := spareOf(path)
	f, err := os.OpenFile(spare, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(spare)
		}
	}()
	_, werr := f.Write(append(data, '\n'))
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if exchange(spare, path) != nil {
		if err := os.Rename(spare, path); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("write %s: sync its directory: %w", path, err)
	}
	return nil
}

// syncDir syncs the directory dir, so that a rename in it is durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// spareOf is the spare file of the record at path: a temporary file (see
// recordIDs) that writeJSON writes before swapping it with the record.
func spareOf(path string) string {
	return filepath.Join(filepath.Dir(path), tempPrefix+filepath.Base(path))
}

// removeRecord removes the record at path and its spare, then syncs
// their directory so that the removal outlives a crash; a missing file is
// not an error.
func removeRecord(path string) error {
	if err := errors.Join(removeFile(path), removeFile(spareOf(path))); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

// removeFile removes path; a missing file is not an error.
func removeFile(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}
