package fleet

import (
	"cmp"
	"context"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefaultDetachInterval is how often a Detacher looks again at the down
// nodes marked stranded, as a fallback to its watch.
const DefaultDetachInterval = time.Minute

// DetacherConfig configures a Detacher. Controls and Detach are required.
type DetacherConfig struct {
	// Interval is how often the Detacher looks again at every marked node
	// (default DefaultDetachInterval): a fallback to its watch, and the
	// retry of a detach that failed.
	Interval time.Duration
	// Controls reports whether this node runs the controller of the plugin
	// (the agent: a current csi-controller registration).
	Controls func(pluginID string) bool
	// Detach detaches the stranded attachment st through the plugin's
	// controller (the agent: the volume manager's Detach, which checks
	// again that the node is down and claims nothing, and forgets the
	// attachment once detached).
	Detach func(ctx context.Context, st Stranded) error
	// Logger receives a line per detach; nil discards them.
	Logger hclog.Logger
}

// Detacher detaches, from this node, the stranded attachments of down
// nodes (see Stranded) whose plugin's controller runs here, as Nomad's
// volume watcher does: a node that dies leaves no attachment behind once
// its claims are freed. It watches the marks the GC's leader puts on down
// nodes (stranded/<node>), reads only those nodes' attachments through the
// node index, and detaches each volume under a guard in etcd
// (detaching/<ns>/<id>/<node>, under this node's lease), so that of the
// nodes that run the controller, one does it. An idle fleet costs it
// nothing: no mark, no read.
type Detacher struct {
	s   *Store
	cfg DetacherConfig
	log hclog.Logger

	cancel context.CancelFunc
	done   chan struct{}
}

// StartDetacher starts the Detacher of s until Stop.
func StartDetacher(s *Store, cfg DetacherConfig) (*Detacher, error) {
	if cfg.Controls == nil || cfg.Detach == nil || cfg.Interval < 0 {
		return nil, model.Refusef(model.ErrInvalid,
			"detacher: Controls and Detach are required, and Interval (%v) must not be negative (0: the default %v)",
			cfg.Interval, DefaultDetachInterval)
	}
	cfg.Interval = cmp.Or(cfg.Interval, DefaultDetachInterval)
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &Detacher{s: s, cfg: cfg, log: log.Named("fleet-detacher"), cancel: cancel, done: make(chan struct{})}
	go d.run(ctx)
	return d, nil
}

// Stop stops the Detacher and waits for it.
func (d *Detacher) Stop() {
	d.cancel()
	<-d.done
}

// run watches the marks, looking at every marked node first and again
// at every interval, until ctx ends.
func (d *Detacher) run(ctx context.Context) {
	defer close(d.done)
	tick := time.NewTicker(d.cfg.Interval)
	defer tick.Stop()
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		events := d.s.client.Watch(wctx, d.s.keys.strandedMarks(), clientv3.WithPrefix(), clientv3.WithFilterDelete())
		d.Step(ctx)
		d.follow(ctx, events, tick.C)
		cancel()
		_ = sleep(ctx, d.cfg.Interval)
	}
}

// follow handles the marks as they are put, and every marked node at each
// tick, until the watch fails or ctx ends.
func (d *Detacher) follow(ctx context.Context, events clientv3.WatchChan, tick <-chan time.Time) {
	for {
		select {
		case <-ctx.Done():
			return
		case resp, ok := <-events:
			nodes, ok := watched(resp, ok, d.s.keys.strandedMarks())
			if !ok {
				return
			}
			for _, node := range nodes {
				d.node(ctx, node)
			}
		case <-tick:
			d.Step(ctx)
		}
	}
}

// Step looks once at every node marked stranded, and returns the
// attachments it detached.
func (d *Detacher) Step(ctx context.Context) []Stranded {
	var marks *clientv3.GetResponse
	err := d.s.call(ctx, "read the stranded marks", func(ctx context.Context) (err error) {
		marks, err = d.s.client.Get(ctx, d.s.keys.strandedMarks(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
		return etcdErr(err)
	})
	if err != nil {
		d.failed(ctx, "cannot read the marks of down nodes", err)
		return nil
	}
	var done []Stranded
	for _, kv := range marks.Kvs {
		done = append(done, d.node(ctx, strings.TrimPrefix(string(kv.Key), d.s.keys.strandedMarks()))...)
	}
	return done
}

// node detaches the stranded attachments of node whose controller runs
// here and whose guard this node takes.
func (d *Detacher) node(ctx context.Context, node string) []Stranded {
	stranded, err := d.s.StrandedOf(ctx, node)
	if err != nil {
		d.failed(ctx, "cannot look for the attachments of a down node", err)
		return nil
	}
	var done []Stranded
	for _, st := range stranded {
		if !d.cfg.Controls(st.PluginID) {
			continue
		}
		log := d.log.With("namespace", st.Namespace, "volume", st.VolumeID, "plugin", st.PluginID,
			"node", st.Attachment.NodeID, "plugin_node_id", st.Attachment.ExternalNodeID)
		taken, release, err := d.s.guardDetach(ctx, st)
		if err != nil || !taken {
			d.failed(ctx, "another node detaches this volume, or the guard could not be taken", err)
			continue
		}
		err = d.cfg.Detach(ctx, st)
		release()
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("could not detach a volume from a down node; trying again at the next interval", "error", err)
			}
			continue
		}
		log.Info("detached a volume from a down node")
		done = append(done, st)
	}
	return done
}

// failed logs err, if any, unless the Detacher stops.
func (d *Detacher) failed(ctx context.Context, what string, err error) {
	if err != nil && ctx.Err() == nil {
		d.log.Warn(what+"; trying again at the next interval", "error", err)
	}
}
