package volumes

import (
	"context"
	"errors"
	"strings"

	"github.com/asynkron/protoactor-go/actor"
	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/messages"
)

// conditionPrefix starts the last error a reconcile records on a publish
// whose volume the node plugin reports abnormal.
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
	out := &messages.VolumeStats{VolumePath: pub.GetTargetPath()}
	for _, u := range resp.GetUsage() {
		out.Usage = append(out.Usage, &messages.VolumeUsage{
			Unit:      strings.ToLower(u.GetUnit().String()),
			Available: u.GetAvailable(), Total: u.GetTotal(), Used: u.GetUsed(),
		})
	}
	out.Condition = volumeCondition(resp.ProtoReflect().GetUnknown())
	return out, nil
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
// volume is, and records an abnormal condition as the last error of the
// publish asked about (clearing one it recorded before once the volume is
// normal again). A NotFound answer is abnormal: the plugin says the volume
// does not exist there. A plugin that cannot answer otherwise changes
// nothing.
func (j *job) checkCondition(ctx context.Context) error {
	pub := firstPublished(j.rec)
	if pub == nil {
		return nil
	}
	stats, err := j.volumeStats(ctx, pub)
	if errors.Is(err, csi.ErrNotFound) {
		stats, err = &messages.VolumeStats{Condition: &messages.VolumeCondition{Abnormal: true, Message: err.Error()}}, nil
	}
	if err != nil {
		j.log.Warn("NodeGetVolumeStats failed: the volume's condition is unknown", "target_path", pub.GetTargetPath(), "error", err)
		return nil
	}
	want := ""
	if c := stats.GetCondition(); c.GetAbnormal() {
		want = conditionPrefix + c.GetMessage()
		j.log.Warn("the node plugin reports the volume abnormal", "target_path", pub.GetTargetPath(), "condition", c.GetMessage())
	}
	if pub.GetLastError() == want || (want == "" && !strings.HasPrefix(pub.GetLastError(), conditionPrefix)) {
		return nil
	}
	pub.LastError = want
	return j.save()
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
	j := newJob(m.env, key, resp.GetRecord(), func(*messages.VolumeRecord) {})
	m.workers.Add(1)
	go func() {
		defer m.workers.Done()
		defer j.close()
		rpcCtx, cancel := context.WithTimeout(m.env.base, m.env.rpcTimeout)
		defer cancel()
		stats, err := j.volumeStats(rpcCtx, pub)
		if err != nil {
			resp.StatsError = err.Error()
		}
		resp.Stats = stats
		root.Send(to, resp)
	}()
}
