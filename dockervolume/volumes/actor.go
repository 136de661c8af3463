package volumes

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"

	"github.com/plugvisor/plugvisor/discovery"
	"github.com/plugvisor/plugvisor/dockervolume"
)

// opKind is what a volumeRequest asks.
type opKind int

const (
	opCreate opKind = iota + 1
	opInspect
	opList
	opRemove
	opForceRemove
	opMount
	opUnmount
	opPath
)

// opDoneNames say, for the log, what a change did.
var opDoneNames = map[opKind]string{opCreate: "created", opRemove: "removed", opForceRemove: "removed (forced)",
	opMount: "mounted", opUnmount: "unmounted"}

var opNames = map[opKind]string{opCreate: "create", opInspect: "inspect", opList: "list", opRemove: "remove", opForceRemove: "force remove",
	opMount: "mount", opUnmount: "unmount", opPath: "path"}

// The volume service's messages. They stay inside this package: the
// facade sends volumeRequest and gets volumeReply at replyTo; the work
// goroutines send opDone to the actor.
type (
	// volumeRequest is sent by the Service facade to the service actor.
	volumeRequest struct {
		op               opKind
		name, driver, id string
		opts             map[string]string
		// labels are a new volume's (the anonymous label, for one).
		labels  map[string]string
		replyTo *actor.PID
	}
	// volumeReply is the service's answer to replyTo.
	volumeReply struct {
		volume Volume
		list   List
		err    error
	}
	// opDone is sent by an operation's goroutine to the service actor:
	// the volume's record as the operation left it (durable already) and
	// the reply to send.
	opDone struct {
		req     *volumeRequest
		changed bool
		rec     *record // nil: the volume is gone
		reply   *volumeReply
	}
)

// volumesActor owns the records of every volume, and the queue of
// operations of each: one operation per volume runs at a time, on a
// goroutine of its own (driver calls and store writes never run on the
// actor's goroutine), and the next starts when it is over. Inspect and List
// read a copy and do not queue. The records map is changed only after the
// store has the change, and it is shared by the actor's incarnations: a
// restart after a panic keeps the records, waits for the operations in
// flight (whose outcomes reach the new incarnation), and drops the
// requests queued behind them, whose callers' contexts end them.
type volumesActor struct {
	cfg     Config
	log     hclog.Logger
	records map[string]*record
	queues  map[string][]*volumeRequest // by volume name; the head is running
	work    context.Context
	cancel  context.CancelFunc
	running *sync.WaitGroup // the goroutines in flight
}

func newVolumesActor(cfg Config, records map[string]*record, running *sync.WaitGroup) *volumesActor {
	return &volumesActor{cfg: cfg, log: cfg.Logger, records: records, queues: map[string][]*volumeRequest{}, running: running}
}

// Receive handles requests and finished operations.
func (a *volumesActor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		a.work, a.cancel = context.WithCancel(context.Background())
	case *volumeRequest:
		a.onRequest(ctx, msg)
	case *opDone:
		a.onDone(ctx, msg)
	case *actor.Stopping, *actor.Restarting:
		a.cancel()
		a.running.Wait()
	}
}

func (a *volumesActor) onRequest(ctx actor.Context, req *volumeRequest) {
	switch req.op {
	case opList:
		known := make([]Volume, 0, len(a.records))
		for _, r := range a.records {
			known = append(known, r.info())
		}
		a.goRun(ctx, req, nil, func(ctx context.Context, _ *volumeRequest, _ *record) (*volumeReply, bool, *record) {
			return &volumeReply{list: listVolumes(ctx, a.cfg.Drivers.All(), known)}, false, nil
		})
		return
	case opInspect:
		a.goRun(ctx, req, a.records[req.name].clone(), a.inspect)
		return
	}
	a.queues[req.name] = append(a.queues[req.name], req)
	if len(a.queues[req.name]) == 1 {
		a.start(ctx, req)
	}
}

// op is the work of one operation on a copy of the volume's record (nil
// when there is none); it returns the reply, and the record as it left
// it when it changed it.
type op func(ctx context.Context, req *volumeRequest, rec *record) (reply *volumeReply, changed bool, after *record)

func (a *volumesActor) start(ctx actor.Context, req *volumeRequest) {
	ops := map[opKind]op{opCreate: a.create, opRemove: a.adopting(a.remove), opForceRemove: a.forceRemove, opMount: a.adopting(a.mount),
		opUnmount: a.unmount, opPath: a.adopting(a.path)}
	a.goRun(ctx, req, a.records[req.name].clone(), ops[req.op])
}

// goRun runs fn on a goroutine bounded by OpTimeout, and sends its outcome back.
func (a *volumesActor) goRun(ctx actor.Context, req *volumeRequest, rec *record, fn op) {
	root, self := ctx.ActorSystem().Root, ctx.Self()
	a.running.Add(1)
	go func() {
		defer a.running.Done()
		work, cancel := context.WithTimeout(a.work, a.cfg.OpTimeout)
		defer cancel()
		reply, changed, after := fn(work, req, rec)
		root.Send(self, &opDone{req: req, reply: reply, changed: changed, rec: after})
	}()
}

func (a *volumesActor) onDone(ctx actor.Context, msg *opDone) {
	req := msg.req
	if msg.changed {
		if msg.rec == nil {
			delete(a.records, req.name)
		} else {
			a.records[req.name] = msg.rec
		}
	}
	if err := msg.reply.err; err != nil {
		a.log.Debug("volume operation failed", "op", opNames[req.op], "volume", req.name, "id", req.id, "error", err)
	} else if done, ok := opDoneNames[req.op]; ok && msg.changed {
		a.log.Info("volume "+done, "volume", req.name, "driver", msg.reply.volume.Driver, "id", req.id)
	}
	ctx.Send(req.replyTo, msg.reply)
	if req.op == opList || req.op == opInspect {
		return
	}
	q := a.queues[req.name]
	if len(q) == 0 || q[0] != req {
		return // queued in an earlier incarnation
	}
	if q = q[1:]; len(q) == 0 {
		delete(a.queues, req.name)
		return
	}
	a.queues[req.name] = q
	a.start(ctx, q[0])
}

func failed(err error) *volumeReply { return &volumeReply{err: err} }

// find looks for a volume the service has no record of among the drivers,
// as dockerd does for a name it does not know: the one driver whose Get
// knows it. Two that do are a conflict; none is dockervolume.ErrNoSuchVolume.
func (a *volumesActor) find(ctx context.Context, name string) (*record, error) {
	var found []string
	for driver, c := range a.cfg.Drivers.All() {
		if _, err := c.Get(ctx, name); err == nil {
			found = append(found, driver)
		}
	}
	slices.Sort(found)
	switch len(found) {
	case 0:
		return nil, noSuchVolume(name)
	case 1:
		return &record{Name: name, Driver: found[0], CreatedAt: time.Now().UTC(), Mounts: map[string]*mountRecord{}}, nil
	}
	return nil, fmt.Errorf("%w: volume %q is known to drivers %s; create it naming one", ErrNameConflict, name, strings.Join(found, ", "))
}

// adopting runs fn on the volume's record, or, when there is none, on the
// record of the volume as a driver knows it (find), written first: the
// name then maps to that driver whatever fn's outcome.
func (a *volumesActor) adopting(fn op) op {
	return func(ctx context.Context, req *volumeRequest, rec *record) (*volumeReply, bool, *record) {
		if rec != nil {
			return fn(ctx, req, rec)
		}
		rec, err := a.find(ctx, req.name)
		if err == nil {
			err = save(a.cfg.Bucket, req.name, rec)
		}
		if err != nil {
			return failed(err), false, nil
		}
		a.log.Info("volume adopted from its driver", "volume", req.name, "driver", rec.Driver)
		reply, changed, after := fn(ctx, req, rec.clone())
		if !changed {
			after = rec
		}
		return reply, true, after
	}
}

func noSuchVolume(name string) error {
	return fmt.Errorf("%w: %q; create it first", dockervolume.ErrNoSuchVolume, name)
}

func (a *volumesActor) create(ctx context.Context, req *volumeRequest, rec *record) (*volumeReply, bool, *record) {
	if rec != nil {
		if rec.Driver != req.driver {
			return failed(fmt.Errorf("%w: volume %q exists with driver %q, not %q", ErrNameConflict, req.name, rec.Driver, req.driver)), false, nil
		}
		v := rec.info()
		if client := a.cfg.Drivers.All()[rec.Driver]; client != nil {
			v.Scope = scopeOf(ctx, client)
		}
		return &volumeReply{volume: v}, false, nil
	}
	client, err := a.cfg.Drivers.Driver(ctx, req.driver)
	if err != nil {
		return failed(err), false, nil
	}
	if err := client.Create(ctx, req.name, req.opts); err != nil {
		return failed(err), false, nil
	}
	rec = &record{Name: req.name, Driver: req.driver, Options: req.opts, Labels: req.labels, CreatedAt: time.Now().UTC(), Mounts: map[string]*mountRecord{}}
	if err := save(a.cfg.Bucket, req.name, rec); err != nil {
		return failed(err), false, nil
	}
	v := rec.info()
	v.Scope = scopeOf(ctx, client)
	return &volumeReply{volume: v}, true, rec
}

// scopeOf is the driver's scope, empty when it does not say.
func scopeOf(ctx context.Context, client *dockervolume.Client) string {
	caps, err := client.Capabilities(ctx)
	if err != nil {
		return ""
	}
	return caps.Scope
}

// forceRemove is remove as dockerd's "rm -f": no volume is no error, and
// the record goes whatever its driver says (dockerd's purge on error);
// the driver's error is still the answer, as dockerd's is.
func (a *volumesActor) forceRemove(ctx context.Context, req *volumeRequest, rec *record) (*volumeReply, bool, *record) {
	if rec == nil {
		found, err := a.find(ctx, req.name)
		if errors.Is(err, dockervolume.ErrNoSuchVolume) {
			return &volumeReply{volume: Volume{Name: req.name}}, false, nil
		}
		if err != nil {
			return failed(err), false, nil
		}
		rec = found
	}
	if rec.inUse() {
		return a.remove(ctx, req, rec)
	}
	var driverErr error
	if client, err := a.cfg.Drivers.Driver(ctx, rec.Driver); err != nil {
		driverErr = err
	} else {
		driverErr = client.Remove(ctx, req.name)
	}
	if err := save(a.cfg.Bucket, req.name, nil); err != nil {
		return failed(err), false, nil
	}
	if driverErr != nil {
		a.log.Warn("volume removed from the records although its driver did not remove it", "volume", req.name,
			"driver", rec.Driver, "error", driverErr)
		return failed(driverErr), true, nil
	}
	return &volumeReply{volume: rec.info()}, true, nil
}

func (a *volumesActor) remove(ctx context.Context, req *volumeRequest, rec *record) (*volumeReply, bool, *record) {
	if rec == nil {
		return failed(noSuchVolume(req.name)), false, nil
	}
	if rec.inUse() {
		return failed(fmt.Errorf("%w: volume %q is mounted by %s; unmount it first", ErrVolumeInUse, req.name,
			strings.Join(slices.Sorted(maps.Keys(rec.Mounts)), ", "))), false, nil
	}
	client, err := a.cfg.Drivers.Driver(ctx, rec.Driver)
	if err != nil {
		return failed(err), false, nil
	}
	if err := client.Remove(ctx, req.name); err != nil {
		return failed(err), false, nil
	}
	if err := save(a.cfg.Bucket, req.name, nil); err != nil {
		return failed(err), false, nil
	}
	return &volumeReply{volume: rec.info()}, true, nil
}

func (a *volumesActor) mount(ctx context.Context, req *volumeRequest, rec *record) (*volumeReply, bool, *record) {
	if rec == nil {
		return failed(noSuchVolume(req.name)), false, nil
	}
	if m := rec.Mounts[req.id]; m != nil && !m.Pending {
		m.Count++
		if err := save(a.cfg.Bucket, req.name, rec); err != nil {
			return failed(err), false, nil
		}
		return &volumeReply{volume: Volume{Name: req.name, Driver: rec.Driver, Mountpoint: m.Mountpoint}}, true, rec
	}
	client, err := a.cfg.Drivers.Driver(ctx, rec.Driver)
	if err != nil {
		return failed(err), false, nil
	}
	// Written before the call: a crash during it leaves a pending mount,
	// which keeps the volume from removal until it is unmounted.
	rec.Mounts[req.id] = &mountRecord{Pending: true}
	if err := save(a.cfg.Bucket, req.name, rec); err != nil {
		return failed(err), false, nil
	}
	mountpoint, err := client.Mount(ctx, req.name, req.id)
	if err != nil {
		delete(rec.Mounts, req.id)
		if serr := save(a.cfg.Bucket, req.name, rec); serr != nil {
			return failed(errors.Join(err, serr)), true, rec.withPending(req.id)
		}
		return failed(err), true, rec
	}
	rec.Mounts[req.id] = &mountRecord{Count: 1, Mountpoint: mountpoint}
	if err := save(a.cfg.Bucket, req.name, rec); err != nil {
		return failed(err), true, rec.withPending(req.id)
	}
	return &volumeReply{volume: Volume{Name: req.name, Driver: rec.Driver, Mountpoint: mountpoint}}, true, rec
}

// withPending returns r with id pending again: what the store holds when
// the write after a driver call failed.
func (r *record) withPending(id string) *record {
	r.Mounts[id] = &mountRecord{Pending: true}
	return r
}

func (a *volumesActor) unmount(ctx context.Context, req *volumeRequest, rec *record) (*volumeReply, bool, *record) {
	if rec == nil {
		return failed(noSuchVolume(req.name)), false, nil
	}
	m := rec.Mounts[req.id]
	switch {
	case m == nil:
		return failed(fmt.Errorf("%w: volume %q, mount ID %q", ErrNotMounted, req.name, req.id)), false, nil
	case m.Count > 1:
		m.Count--
		if err := save(a.cfg.Bucket, req.name, rec); err != nil {
			return failed(err), false, nil
		}
		return &volumeReply{volume: Volume{Name: req.name, Driver: rec.Driver}}, true, rec
	}
	client, err := a.cfg.Drivers.Driver(ctx, rec.Driver)
	if err != nil {
		return failed(err), false, nil
	}
	// A pending mount may never have reached the driver: its refusal to
	// unmount what it never mounted is no reason to keep the record.
	if err := client.Unmount(ctx, req.name, req.id); err != nil && !m.Pending {
		return failed(err), false, nil
	}
	delete(rec.Mounts, req.id)
	if err := save(a.cfg.Bucket, req.name, rec); err != nil {
		return failed(err), false, nil
	}
	return &volumeReply{volume: Volume{Name: req.name, Driver: rec.Driver}}, true, rec
}

func (a *volumesActor) path(ctx context.Context, req *volumeRequest, rec *record) (*volumeReply, bool, *record) {
	if rec == nil {
		return failed(noSuchVolume(req.name)), false, nil
	}
	client, err := a.cfg.Drivers.Driver(ctx, rec.Driver)
	if err != nil {
		return failed(err), false, nil
	}
	mountpoint, err := client.Path(ctx, req.name)
	if err != nil {
		return failed(err), false, nil
	}
	return &volumeReply{volume: Volume{Name: req.name, Driver: rec.Driver, Mountpoint: mountpoint}}, false, nil
}

// inspect describes a known volume with what its driver's Get says; a
// driver that cannot answer leaves its error in the answer, not a failure.
func (a *volumesActor) inspect(ctx context.Context, req *volumeRequest, rec *record) (*volumeReply, bool, *record) {
	known := rec != nil
	if !known {
		found, err := a.find(ctx, req.name)
		if err != nil {
			return failed(err), false, nil
		}
		rec = found
	}
	v := rec.info()
	v.Known = known
	// As dockerd, wait for a driver that is gone (Drivers.Driver); when it
	// does not come back, answer what the records hold, and why.
	client, err := a.cfg.Drivers.Driver(ctx, rec.Driver)
	if err == nil {
		var got dockervolume.Volume
		if got, err = client.Get(ctx, req.name); err == nil {
			v.Mountpoint, v.Status = got.Mountpoint, got.Status
		}
	}
	if err == nil {
		var caps dockervolume.Capabilities
		caps, err = client.Capabilities(ctx)
		v.Scope = caps.Scope
	}
	if err != nil {
		v.Error = err.Error()
	}
	return &volumeReply{volume: v}, false, nil
}

// listVolumes merges the volumes the service knows with every driver's
// List, each with its driver's Capabilities scope, as dockerd's List does.
// A driver that fails is a warning, and so is one that is gone (no longer
// registered) while the service knows volumes of it; their known volumes
// are still listed. Unlike dockerd, the list does not wait for a driver
// that is gone: inspect does.
func listVolumes(ctx context.Context, drivers map[string]*dockervolume.Client, known []Volume) List {
	type answer struct {
		driver  string
		scope   string
		volumes []dockervolume.Volume
		err     error
	}
	answers := make(chan answer, len(drivers))
	for name, c := range drivers {
		go func() {
			vols, err := c.List(ctx)
			var caps dockervolume.Capabilities
			if err == nil {
				caps, err = c.Capabilities(ctx)
			}
			answers <- answer{driver: name, scope: caps.Scope, volumes: vols, err: err}
		}()
	}
	byName := map[string]*Volume{}
	for i := range known {
		byName[known[i].Name] = &known[i]
	}
	var out List
	for range drivers {
		ans := <-answers
		if ans.err != nil {
			out.Warnings = append(out.Warnings, fmt.Sprintf("driver %q: %v", ans.driver, ans.err))
			continue
		}
		for _, dv := range ans.volumes {
			v := byName[dv.Name]
			switch {
			case v == nil:
				v = &Volume{Name: dv.Name, Driver: ans.driver}
				byName[dv.Name] = v
			case v.Driver != ans.driver:
				continue // another driver's volume of the same name: ours maps it elsewhere
			}
			v.Scope, v.Status = ans.scope, dv.Status
			if dv.Mountpoint != "" {
				v.Mountpoint = dv.Mountpoint
			}
		}
	}
	gone := map[string]bool{}
	for _, v := range byName {
		out.Volumes = append(out.Volumes, *v)
		if _, ok := drivers[v.Driver]; !ok && v.Known {
			gone[v.Driver] = true
		}
	}
	for driver := range gone {
		out.Warnings = append(out.Warnings, fmt.Sprintf("driver %q: %v: its volumes are listed as their records have them, without a scope", driver, discovery.ErrNotFound))
	}
	slices.SortFunc(out.Volumes, func(x, y Volume) int { return strings.Compare(x.Name, y.Name) })
	slices.Sort(out.Warnings)
	return out
}
