package catalog

import (
	"cmp"
	"reflect"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/names"
)

// The catalog actor's writes against its working state: each returns the
// change it makes, an error for input bad on its face, or its refusal in
// w.err (see apply).

func (a *catalogActor) applyRegister(w *catalogWrite, cmd *messages.RegisterVolume) (catalogChange, error) {
	var change catalogChange
	v := model.VolumeFromProto(cmd.GetVolume())
	v.Namespace = cmp.Or(v.Namespace, model.DefaultNamespace)
	key, err := catalogVolumeKey(v.Namespace, v.ID)
	if err == nil {
		err = model.CheckRegistration(v)
	}
	if err == nil {
		err = model.TopologyRefusal([]*model.CSIVolume{v}, a.state.plugins, false) // a batch names its item itself
	}
	if err != nil {
		return change, err
	}
	v.ExternalID = v.PluginVolumeID()
	if w.err = a.state.checkRoom(key, a.maxVolumes); w.err != nil {
		return change, nil
	}
	old := a.state.volumes[key]
	if old == nil || !old.Deleting && !(old.Created && !v.Created) {
		if w.err = a.externalIDTaken(key, v); w.err != nil {
			return change, nil
		}
	}
	if w.volume, w.err = model.RegisterOver(old, v); w.err != nil || w.volume == old {
		return change, nil
	}
	w.volume.Health = model.PluginHealth(a.state.plugins[v.PluginID])
	change.putVolume(key, w.volume)
	return change, nil
}

func (a *catalogActor) applyDeregister(w *catalogWrite, cmd *messages.DeregisterVolume) (catalogChange, error) {
	var change catalogChange
	key, err := catalogVolumeKey(cmd.GetNamespace(), cmd.GetVolumeId())
	if err != nil {
		return change, err
	}
	v, err := a.state.volume(key)
	if err == nil {
		err = model.DeregisterOf(v)
	}
	if w.err = err; err == nil {
		change.putVolume(key, nil)
	}
	return change, nil
}

func (a *catalogActor) applyClaim(w *catalogWrite, cmd *messages.ClaimVolume) (catalogChange, error) {
	var change catalogChange
	key, err := catalogVolumeKey(cmd.GetNamespace(), cmd.GetVolumeId())
	claim := &model.Claim{
		AllocID: cmd.GetAllocId(),
		NodeID:  cmp.Or(cmd.GetNodeId(), a.nodeID),
		Mode:    model.ClaimMode(cmd.GetMode()),
		State:   model.ClaimStateTaken,
		// The capability the claim chooses; the model fills it in.
		AccessMode: model.AccessMode(cmd.GetAccessMode()), AttachmentMode: model.AttachmentMode(cmd.GetAttachmentMode()),
	}
	if err := cmp.Or(err, model.CheckClaim(claim), checkUsage(cmd)); err != nil {
		return change, err
	}
	v, err := a.state.volume(key)
	if err == nil {
		err = usageConflict(v, cmd)
	}
	if err != nil {
		w.err = err
		return change, nil
	}
	return a.changeClaims(w, key, v, func(v *model.CSIVolume) (*model.CSIVolume, error) {
		changed, err := model.ClaimOn(v, claim)
		if err == nil && changed != v {
			err = a.nodeFit(v, claim)
		}
		return changed, err
	}), nil
}

// nodeFit checks a claim that the model accepts against the fingerprint of
// v's plugin on the claiming node (model.NodeFitOn), counting the plugin's volumes
// claimed there from the working state.
func (a *catalogActor) nodeFit(v *model.CSIVolume, c *model.Claim) error {
	node := a.state.plugins[v.PluginID].NodeOn(c.NodeID)
	var onNode []string
	if node != nil && node.MaxVolumes > 0 {
		for key, o := range a.state.volumes {
			if o.PluginID == v.PluginID && o.ClaimedOn(c.NodeID) {
				onNode = append(onNode, key.namespace+"/"+key.id)
			}
		}
	}
	return model.NodeFitOn(v, c, node, onNode)
}

// checkUsage checks the plugin and modes a claim says it uses, where it
// says any.
func checkUsage(cmd *messages.ClaimVolume) error {
	var problems []error
	if cmd.GetPluginId() != "" {
		problems = append(problems, names.Check("plugin ID", cmd.GetPluginId()))
	}
	if cmd.GetAccessMode() != "" {
		problems = append(problems, model.AccessMode(cmd.GetAccessMode()).Validate())
	}
	if cmd.GetAttachmentMode() != "" {
		problems = append(problems, model.AttachmentMode(cmd.GetAttachmentMode()).Validate())
	}
	if err := cmp.Or(problems...); err != nil {
		return model.Refusal(model.ErrInvalid, err)
	}
	return nil
}

// usageConflict refuses a claim that reaches v through another plugin, or
// asks for modes that none of v's capabilities has. (Which capability a
// claim that fits several chooses is the model's to decide.)
func usageConflict(v *model.CSIVolume, cmd *messages.ClaimVolume) error {
	fits := func(c model.RequestedCapability) bool {
		return cmp.Or(cmd.GetAccessMode(), string(c.AccessMode)) == string(c.AccessMode) &&
			cmp.Or(cmd.GetAttachmentMode(), string(c.AttachmentMode)) == string(c.AttachmentMode)
	}
	if cmp.Or(cmd.GetPluginId(), v.PluginID) == v.PluginID && slices.ContainsFunc(v.Capabilities(), fits) {
		return nil
	}
	var caps []string
	for _, c := range v.Capabilities() {
		caps = append(caps, string(c.AttachmentMode)+" "+string(c.AccessMode))
	}
	return model.Refusef(model.ErrClaimRefused, "volume %q in namespace %q is served by plugin %q as %s; alloc %s asked for it through plugin %q as %s %s",
		v.ID, v.Namespace, v.PluginID, strings.Join(caps, " or "),
		cmd.GetAllocId(), cmd.GetPluginId(), cmp.Or(cmd.GetAttachmentMode(), "any attachment"), cmp.Or(cmd.GetAccessMode(), "any access"))
}

func (a *catalogActor) applyRelease(w *catalogWrite, cmd *messages.ReleaseVolume) (catalogChange, error) {
	var change catalogChange
	key, err := catalogVolumeKey(cmd.GetNamespace(), cmd.GetVolumeId())
	claim := &model.Claim{
		AllocID:   cmd.GetAllocId(),
		NodeID:    a.nodeID,
		Mode:      model.ClaimModeRead,
		State:     model.ClaimState(cmp.Or(cmd.GetState(), string(model.ClaimStateReadyToFree))),
		LastError: lastErrorOf(cmd.GetLastError()),
	}
	if err := cmp.Or(err, model.CheckClaim(claim)); err != nil {
		return change, err
	}
	if claim.State == model.ClaimStateTaken {
		return change, model.Refusef(model.ErrInvalid, "release of alloc %s: state %q takes a claim; releasing needs a later state",
			claim.AllocID, claim.State)
	}
	v, err := a.state.volume(key)
	if err != nil {
		w.err = err
		return change, nil
	}
	return a.changeClaims(w, key, v, func(v *model.CSIVolume) (*model.CSIVolume, error) { return model.ReleaseOn(v, claim) }), nil
}

// changeClaims runs a claim operation on v and returns the change it
// makes: none when it is refused (w.err says why) or changes no claim.
func (a *catalogActor) changeClaims(w *catalogWrite, key volumeKey, v *model.CSIVolume,
	op func(*model.CSIVolume) (*model.CSIVolume, error)) catalogChange {
	var change catalogChange
	changed, err := op(v)
	if err != nil {
		w.err = err
		return change
	}
	if changed != v {
		change.putVolume(key, changed)
	}
	w.volume = changed
	return change
}

func (a *catalogActor) applyFingerprint(fp *messages.CSIFingerprint) (catalogChange, error) {
	var change catalogChange
	info, err := model.InstanceFromFingerprint(fp)
	if err == nil {
		err = names.Check("plugin name", info.PluginID)
	}
	if err != nil {
		return change, model.Refusal(model.ErrInvalid, err)
	}
	old := a.state.plugins[info.PluginID]
	if lateWordOn(old, a.nodeID, info) {
		return change, nil
	}
	p := old.Copy()
	if p == nil {
		p = model.NewCSIPlugin(info.PluginID, 0)
	}
	if err := p.AddPlugin(a.nodeID, info); err != nil {
		return change, model.Refusal(model.ErrInvalid, err)
	}
	if reflect.DeepEqual(old, p) {
		return change, nil // the same fingerprint again
	}
	change.plugins = []*model.CSIPlugin{p}
	change.followHealth(a.state)
	return change, nil
}

// lateWord reports whether info is the final fingerprint of an instance
// that another instance has replaced, current being the word kept of the
// same plugin service on the same node: the manager publishes it after the
// new instance may have spoken, and it must not hide the new one. The new
// instance is another alloc's, or the same alloc's at a new socket: then
// info names its own alloc in ReplacedBy and current, of that alloc, was
// taken at another socket (SocketPath; when either is unknown, as in a
// record kept before sockets were recorded, the word is taken). The final
// word of the allocation current names in ReplacedBy is no late word: that
// allocation was deregistered before it spoke.
func lateWord(current, info *model.CSIInfo) bool {
	if current == nil || !info.Stopped() {
		return false
	}
	if current.AllocID == info.AllocID {
		return info.ReplacedBy == info.AllocID && current.SocketPath != "" && info.SocketPath != "" && current.SocketPath != info.SocketPath
	}
	return current.ReplacedBy != info.AllocID
}

// lateWordOn is lateWord against p's record of info's service on nodeID.
func lateWordOn(p *model.CSIPlugin, nodeID string, info *model.CSIInfo) bool {
	return lateWord(recordOn(p, nodeID, info), info)
}

// recordOn is p's record of info's service (controller or node) on
// nodeID; nil when p has none.
func recordOn(p *model.CSIPlugin, nodeID string, info *model.CSIInfo) *model.CSIInfo {
	if p == nil {
		return nil
	}
	entries := p.Nodes
	if info.ControllerInfo != nil {
		entries = p.Controllers
	}
	return entries[nodeID]
}

// maxLastError bounds the last error a past claim keeps: a plugin's
// error text is the plugin's to choose.
const maxLastError = 1024

// lastErrorOf is e cut to maxLastError bytes, on a rune boundary.
func lastErrorOf(e string) string {
	if len(e) <= maxLastError {
		return e
	}
	cut := maxLastError
	for cut > 0 && !utf8.RuneStart(e[cut]) {
		cut--
	}
	return e[:cut] + "…"
}
