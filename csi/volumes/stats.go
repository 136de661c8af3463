package volumes

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/asynkron/protoactor-go/actor"
	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/names"
)

// conditionPrefix started the last error that older versions recorded on
// a publish whose volume the node plugin reported abnormal; a reconcile
// clears it (the condition is the record's own field now).
const conditionPrefix = "NodeGetVolumeStats: volume condition abnormal: "

// volumeStats asks the node plugin for the stats of pub's volume, at pub's
// target path; nil, without error, when the plugin does not advertise
// GET_VOLUME_STATS.
func (j *job) volumeStats(ctx context.Context, pub *messages.VolumePublish) (*messages.VolumeStats, error) {
	node, err := j.nodeClient(ctx, pub.GetNodeSocket())
	if err != nil {
		return nil, err
	}
	caps, err := node.NodeGetCapabilities(ctx)
	if err != nil || !caps.GetVolumeStats {
		return nil, err
	}
	resp, err := node.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{
		VolumeId: j.rec.GetExternalId(), VolumePath: pub.GetTargetPath(),
		StagingTargetPath: j.rec.GetStage().GetStagingPath(),
	})
	if err != nil {
		return nil, err
	}
	condition := volumeCondition(resp.ProtoReflect().GetUnknown())
	if err := checkUsage(resp.GetUsage(), condition != nil); err != nil {
		return nil, err
	}
	out := &messages.VolumeStats{VolumePath: pub.GetTargetPath(), Condition: condition}
	for _, u := range resp.GetUsage() {
		out.Usage = append(out.Usage, &messages.VolumeUsage{
			Unit:      strings.ToLower(u.GetUnit().String()),
			Available: u.GetAvailable(), Total: u.GetTotal(), Used: u.GetUsed(),
		})
	}
	return out, nil
}

// checkUsage refuses a NodeGetVolumeStats answer no volume can have: no
// usage (and no condition either), a unit CSI does not define, or a
// negative number.
func checkUsage(usage []*csipb.VolumeUsage, condition bool) error {
	if len(usage) == 0 && !condition {
		return fmt.Errorf("%w: NodeGetVolumeStats answered no usage: the plugin must report at least bytes", csi.ErrInternal)
	}
	for _, u := range usage {
		if _, known := csipb.VolumeUsage_Unit_name[int32(u.GetUnit())]; !known || u.GetUnit() == csipb.VolumeUsage_UNKNOWN {
			return fmt.Errorf("%w: NodeGetVolumeStats answered a usage in unit %d, which CSI does not define (BYTES or INODES)", csi.ErrInternal, u.GetUnit())
		}
		if u.GetAvailable() < 0 || u.GetTotal() < 0 || u.GetUsed() < 0 {
			return fmt.Errorf("%w: NodeGetVolumeStats answered a negative %s usage (available %d, total %d, used %d)",
				csi.ErrInternal, strings.ToLower(u.GetUnit().String()), u.GetAvailable(), u.GetTotal(), u.GetUsed())
		}
	}
	return nil
}

// volumeCondition decodes the volume_condition field (2) of a
// NodeGetVolumeStatsResponse from its unknown fields: plugins built with
// the specs that had it (1.3 to 1.12, alpha) still send it, and the spec
// module this project builds with no longer declares it. Nil when absent
// or malformed.
func volumeCondition(unknown []byte) *messages.VolumeCondition {
	var out *messages.VolumeCondition
	for len(unknown) > 0 {
		num, typ, n := protowire.ConsumeTag(unknown)
		if n < 0 {
			return nil
		}
		unknown = unknown[n:]
		if num == 2 && typ == protowire.BytesType {
			b, m := protowire.ConsumeBytes(unknown)
			if m < 0 {
				return nil
			}
			out = &messages.VolumeCondition{}
			if proto.Unmarshal(b, out) != nil {
				return nil
			}
			unknown = unknown[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, unknown)
		if m < 0 {
			return nil
		}
		unknown = unknown[m:]
	}
	return out
}

// checkCondition asks the node plugin, where it can say, how the published
// volume is, and records an abnormal condition in the record (clearing it
// once the volume is normal again), telling OnEvent of each change. A
// NotFound answer is abnormal: the plugin says the volume does not exist
// there. A plugin that cannot answer otherwise changes nothing. It never
// fails the reconcile: a condition is news, not an unsettled volume.
func (j *job) checkCondition(ctx context.Context) error {
	pub := firstPublished(j.rec)
	if pub == nil {
		return nil
	}
	stats, err := j.volumeStats(ctx, pub)
	want, known := conditionOf(stats, err)
	if !known {
		j.log.Warn("NodeGetVolumeStats failed: the volume's condition is unknown", "target_path", pub.GetTargetPath(), "error", err)
		return nil
	}
	stale := strings.HasPrefix(pub.GetLastError(), conditionPrefix)
	if j.rec.GetCondition() == want && !stale {
		return nil
	}
	if stale {
		pub.LastError = ""
	}
	j.noteCondition(pub, want)
	if err := j.save(); err != nil {
		j.log.Warn("could not record the volume's condition", "error", err)
	}
	return nil
}

// conditionOf is the condition a NodeGetVolumeStats answer (or error)
// gives a volume: empty when normal, the plugin's message when abnormal,
// the error when the plugin says the volume is not found; known is false
// when the plugin could not say.
func conditionOf(stats *messages.VolumeStats, err error) (want string, known bool) {
	if errors.Is(err, csi.ErrNotFound) {
		return err.Error(), true
	}
	if err != nil {
		return "", false
	}
	if c := stats.GetCondition(); c.GetAbnormal() {
		return cmp.Or(names.Text(c.GetMessage()), "abnormal (the plugin gave no message)"), true
	}
	return "", true
}

// noteCondition sets the record's condition to want, logging and telling
// OnEvent when it changes; the caller saves the record.
func (j *job) noteCondition(pub *messages.VolumePublish, want string) {
	if j.rec.GetCondition() == want {
		return
	}
	kind := EventConditionNormal
	if want != "" {
		kind = EventConditionAbnormal
		j.log.Warn("the node plugin reports the volume abnormal", "target_path", pub.GetTargetPath(), "condition", want)
	} else {
		j.log.Info("the node plugin reports the volume normal again", "target_path", pub.GetTargetPath())
	}
	j.rec.Condition = want
	j.env.emit(kind, j.key, pub, cmp.Or(want, "normal"))
}

// answerStatus sends resp to to, with the node plugin's stats of the
// volume when it is published. The stats are asked for on a goroutine,
// outside the volume's queue, within one RPC timeout: a hanging plugin
// delays the answer by at most that and blocks no operation.
func (m *manager) answerStatus(ctx actor.Context, to *actor.PID, key volumeKey, resp *messages.VolumeStatusResponse) {
	pub := firstPublished(resp.GetRecord())
	if pub == nil || m.closing {
		ctx.Send(to, resp)
		return
	}
	root := ctx.ActorSystem().Root
	m.askStats(key, resp.GetRecord(), pub, func(stats *messages.VolumeStats, err error) {
		if err != nil {
			resp.StatsError = err.Error()
		}
		resp.Stats = stats
		root.Send(to, resp)
	})
}

// askStats asks the node plugin for the stats of pub, the publish of
// rec, on a goroutine, outside the volume's queue, within one RPC
// timeout, and hands the answer to done (on that goroutine).
func (m *manager) askStats(key volumeKey, rec *messages.VolumeRecord, pub *messages.VolumePublish, done func(*messages.VolumeStats, error)) {
	j := newJob(m.env, key, rec, func(*messages.VolumeRecord) {})
	m.workers.Add(1)
	go func() {
		defer m.workers.Done()
		rpcCtx, cancel := context.WithTimeout(m.env.base, m.env.rpcTimeout)
		defer cancel()
		stats, err := j.volumeStats(rpcCtx, pub)
		j.close(err)
		done(stats, err)
	}()
}
