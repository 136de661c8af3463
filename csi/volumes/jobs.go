package volumes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"

	"github.com/plugvisor/plugvisor/csi"
)

// jobConn is a job's link to its plugin: the socket, the cached client
// it was given, and what it obtained itself for the actor to cache.
type jobConn struct {
	socket string
	client *csi.Client
	// dialed is the client the job dialed because none was cached.
	dialed *csi.Client
	// caps are the node capabilities the job fetched because none were cached.
	caps *csi.NodeCapabilities
}

// volumeJobEnv is everything a job needs besides its own inputs. It runs off the
// actor's goroutine and touches no actor state.
type volumeJobEnv struct {
	op      *volumeOp
	conn    jobConn
	claimer csi.Claimer
	opts    csi.Options
	dialFor time.Duration
	retry   volumeRetry
	log     hclog.Logger
}

// connect returns the cached client, or dials the plugin.
func (e *volumeJobEnv) connect(ctx context.Context) (*csi.Client, error) {
	if e.conn.client != nil {
		return e.conn.client, nil
	}
	dialCtx, cancel := context.WithTimeout(ctx, e.dialFor)
	defer cancel()
	c, err := csi.Dial(dialCtx, e.conn.socket, e.opts)
	if err != nil {
		return nil, err
	}
	e.conn.client, e.conn.dialed = c, c
	return c, nil
}

// claim is the claim request of the job's alloc with usage u.
func (e *volumeJobEnv) claim(u csi.Usage) csi.ClaimRequest {
	k := e.op.key
	return csi.ClaimRequest{Plugin: k.plugin, Namespace: k.namespace, VolumeID: k.volumeID, AllocID: e.op.allocID, Usage: u}
}

// describe puts err in the context of the job's operation.
func (e *volumeJobEnv) describe(err error) error {
	if err == nil || errors.Is(err, csi.ErrClaimRefused) {
		return err
	}
	k := e.op.key
	return fmt.Errorf("csi: %s volume %q in namespace %q for alloc %s on plugin %q: %w",
		e.op.kind(), k.volumeID, k.namespace, e.op.allocID, k.plugin, err)
}

// unstage unstages the volume at stagingPath and removes the staging
// directory and its empty parents.
func (e *volumeJobEnv) unstage(ctx context.Context, client *csi.Client, stagingPath string) error {
	req := &csipb.NodeUnstageVolumeRequest{VolumeId: e.op.key.volumeID, StagingTargetPath: stagingPath}
	if _, err := retryVolumeRPC(ctx, e, "NodeUnstageVolume", func(ctx context.Context) (*csipb.NodeUnstageVolumeResponse, error) {
		return client.NodeUnstageVolume(ctx, req)
	}); err != nil {
		return err
	}
	e.log.Info("volume unstaged", "staging_path", stagingPath)
	e.removeEmpty(stagingPath, StagingDirName)
	return nil
}

// removeEmpty removes dir and its empty parents up to <plugin root>/<top>;
// a failure is logged, not returned: the operation itself succeeded.
func (e *volumeJobEnv) removeEmpty(dir, top string) {
	if err := removeEmptyDirs(dir, filepath.Join(e.op.paths.Root(), top)); err != nil {
		e.log.Warn("could not remove an empty directory", "error", err)
	}
}

// mountJob claims, stages and publishes a volume for an alloc.
type mountJob struct {
	env   volumeJobEnv
	op    *volumeOp
	caps  *csi.NodeCapabilities
	stage bool
}

// mountDone is a mount job's result, sent to the actor.
type mountDone struct {
	op   *volumeOp
	conn jobConn
	// stagingPath is where the volume is staged; empty when the plugin does not stage.
	stagingPath string
	// staged is true when this job staged the usage and it stays staged.
	staged bool
	// keepClaim is true when the mount failed but left the volume staged
	// for the alloc, which keeps its claim until it is unmounted.
	keepClaim bool
	err       error
}

func (j *mountJob) run(ctx context.Context) any {
	spec := j.op.mount
	res := &mountDone{op: j.op}
	claim := j.env.claim(spec.usage)
	if err := j.env.claimer.Claim(ctx, claim); err != nil {
		if !errors.Is(err, csi.ErrClaimRefused) {
			err = fmt.Errorf("csi: %w: %w", csi.ErrClaimRefused, err)
		}
		res.err, res.conn = err, j.env.conn
		return res
	}
	res.err = j.env.describe(j.mount(ctx, res))
	res.conn = j.env.conn
	if res.err != nil && !res.keepClaim {
		if err := j.env.claimer.Release(ctx, claim); err != nil {
			j.env.log.Error("could not release the claim of a failed mount", "error", err)
		}
	}
	return res
}

func (j *mountJob) mount(ctx context.Context, res *mountDone) error {
	client, err := j.env.connect(ctx)
	if err != nil {
		return err
	}
	caps, err := j.capabilities(ctx, client)
	if err != nil {
		return err
	}
	spec := j.op.mount
	if caps.StageUnstageVolume {
		res.stagingPath = spec.stagingPath
		if j.stage {
			if err := j.stageVolume(ctx, client); err != nil {
				return err
			}
			res.staged = true
		}
	}
	err = j.publish(ctx, client, res.stagingPath)
	if err == nil || !res.staged {
		return err
	}
	// Undo the staging this mount made: nobody else uses it.
	if uerr := j.env.unstage(ctx, client, spec.stagingPath); uerr != nil {
		res.keepClaim = true
		return fmt.Errorf("%w; undoing its staging failed too, so the alloc keeps its claim until it is unmounted: %w", err, uerr)
	}
	res.staged = false
	return err
}

// capabilities returns the plugin's node capabilities, cached or asked for.
func (j *mountJob) capabilities(ctx context.Context, client *csi.Client) (csi.NodeCapabilities, error) {
	if j.caps != nil {
		return *j.caps, nil
	}
	caps, err := retryVolumeRPC(ctx, &j.env, "NodeGetCapabilities", client.NodeGetCapabilities)
	if err != nil {
		return csi.NodeCapabilities{}, err
	}
	j.env.conn.caps = &caps
	return caps, nil
}

func (j *mountJob) stageVolume(ctx context.Context, client *csi.Client) error {
	spec := j.op.mount
	if err := mkdirPrivate(spec.stagingPath); err != nil {
		return err
	}
	req := &csipb.NodeStageVolumeRequest{
		VolumeId:          j.op.key.volumeID,
		PublishContext:    spec.publishContext,
		StagingTargetPath: spec.stagingPath,
		VolumeCapability:  spec.volumeCapability(),
		VolumeContext:     spec.volumeContext,
	}
	if _, err := retryVolumeRPC(ctx, &j.env, "NodeStageVolume", func(ctx context.Context) (*csipb.NodeStageVolumeResponse, error) {
		return client.NodeStageVolume(ctx, req)
	}); err != nil {
		j.env.removeEmpty(spec.stagingPath, StagingDirName)
		return err
	}
	j.env.log.Info("volume staged", "usage", spec.usage, "staging_path", spec.stagingPath)
	return nil
}

// publish publishes the volume at the alloc's target path. It creates the
// target's parent; the plugin creates the target itself (CSI spec).
func (j *mountJob) publish(ctx context.Context, client *csi.Client, stagingPath string) error {
	spec := j.op.mount
	if err := mkdirPrivate(filepath.Dir(spec.targetPath)); err != nil {
		return err
	}
	req := &csipb.NodePublishVolumeRequest{
		VolumeId:          j.op.key.volumeID,
		PublishContext:    spec.publishContext,
		StagingTargetPath: stagingPath,
		TargetPath:        spec.targetPath,
		VolumeCapability:  spec.volumeCapability(),
		Readonly:          spec.usage.ReadOnly,
		VolumeContext:     spec.volumeContext,
	}
	if _, err := retryVolumeRPC(ctx, &j.env, "NodePublishVolume", func(ctx context.Context) (*csipb.NodePublishVolumeResponse, error) {
		return client.NodePublishVolume(ctx, req)
	}); err != nil {
		j.env.removeEmpty(filepath.Dir(spec.targetPath), PerAllocDirName)
		return err
	}
	j.env.log.Info("volume published", "usage", spec.usage, "target_path", spec.targetPath)
	return nil
}

// unmountJob unpublishes, unstages and releases a volume for an alloc,
// each step only if still to do.
type unmountJob struct {
	env         volumeJobEnv
	op          *volumeOp
	use         allocUse
	targetPath  string
	stagingPath string
	unstage     bool
}

// unmountDone is an unmount job's result, sent to the actor: which steps
// succeeded.
type unmountDone struct {
	op          *volumeOp
	conn        jobConn
	unpublished bool
	unstaged    bool
	released    bool
	err         error
}

func (j *unmountJob) run(ctx context.Context) any {
	res := &unmountDone{op: j.op}
	res.err = j.env.describe(j.unmount(ctx, res))
	res.conn = j.env.conn
	return res
}

func (j *unmountJob) unmount(ctx context.Context, res *unmountDone) error {
	if j.use.published || j.unstage {
		client, err := j.env.connect(ctx)
		if err != nil {
			return err
		}
		if j.use.published {
			if err := j.unpublish(ctx, client); err != nil {
				return err
			}
			res.unpublished = true
		}
		if j.unstage {
			if err := j.env.unstage(ctx, client, j.stagingPath); err != nil {
				return err
			}
			res.unstaged = true
		}
	}
	if err := j.env.claimer.Release(ctx, j.env.claim(j.use.usage)); err != nil {
		return err
	}
	res.released = true
	return nil
}

// unpublish unpublishes the volume from the alloc's target path, then
// removes the target (if the plugin left it) and its empty parents.
func (j *unmountJob) unpublish(ctx context.Context, client *csi.Client) error {
	req := &csipb.NodeUnpublishVolumeRequest{VolumeId: j.op.key.volumeID, TargetPath: j.targetPath}
	if _, err := retryVolumeRPC(ctx, &j.env, "NodeUnpublishVolume", func(ctx context.Context) (*csipb.NodeUnpublishVolumeResponse, error) {
		return client.NodeUnpublishVolume(ctx, req)
	}); err != nil {
		return err
	}
	if err := os.Remove(j.targetPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("csi: NodeUnpublishVolume succeeded but the target path is still there: %w", err)
	}
	j.env.log.Info("volume unpublished", "target_path", j.targetPath)
	j.env.removeEmpty(filepath.Dir(j.targetPath), PerAllocDirName)
	return nil
}

// mkdirPrivate creates dir and its parents, readable by the agent only.
func mkdirPrivate(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("csi: create directory: %w", err)
	}
	return nil
}
