package volumes

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"

	"github.com/plugvisor/plugvisor/actors"
	"github.com/plugvisor/plugvisor/discovery"
	"github.com/plugvisor/plugvisor/dockervolume"
	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/storage"
)

// DefaultName is the volume service actor's name when
// Config.Name is empty.
const DefaultName = "docker-volumes"

// DefaultOpTimeout bounds one volume operation: Docker's longest call
// (dockervolume.LongTimeout) plus the wait for a driver to appear (1+2+4+8 s).
const DefaultOpTimeout = dockervolume.LongTimeout + 15*time.Second

// Sentinel errors of the volume service.
var (
	// ErrVolumeInUse: the volume is mounted (or may be: a mount was under
	// way when the agent stopped); unmount it first.
	ErrVolumeInUse = errclass.New(errclass.Conflict, "volume is in use")
	// ErrNameConflict: a volume of that name exists with another driver.
	ErrNameConflict = errclass.New(errclass.Conflict, "volume name is taken by another driver")
	// ErrNotMounted: the mount ID does not hold the volume.
	ErrNotMounted = errclass.New(errclass.NotFound, "volume is not mounted by that ID")
	// ErrStore: the durable write failed; nothing changed.
	ErrStore = errclass.New(errclass.Store, "cannot write the volume record")
	// ErrShutDown: the service is shut down.
	ErrShutDown = errclass.New(errclass.ShutDown, "the volume service is shut down")
	// ErrInvalidConfig: Start was given a config it cannot use.
	ErrInvalidConfig = errclass.New(errclass.Invalid, "invalid volume service config")
)

// Drivers finds the volume plugins (drivers) that serve volumes.
type Drivers interface {
	// Driver returns a client for the volume plugin name, waiting for it
	// to appear as Docker does.
	Driver(ctx context.Context, name string) (*dockervolume.Client, error)
	// All returns a client for every volume plugin registered now, by name.
	All() map[string]*dockervolume.Client
}

// RegistryDrivers are the volume plugins of a registry. With a Discovery,
// Driver has Docker's Get semantics (it waits 1+2+4+8 s for a plugin to
// appear, and activates a found plugin at once); without, it looks once.
type RegistryDrivers struct {
	Registry  *registry.Registry
	Discovery *discovery.Discovery
	// Retry is how the drivers' clients retry a plugin they cannot reach.
	// The zero Retry is moby's.
	Retry dockervolume.Retry
}

// Driver implements Drivers.
func (d RegistryDrivers) Driver(ctx context.Context, name string) (*dockervolume.Client, error) {
	if d.Discovery != nil {
		p, err := d.Discovery.Get(ctx, name, "VolumeDriver")
		if err != nil {
			return nil, fmt.Errorf("driver %q: %w", name, err)
		}
		return clientOf(p.GetName(), p.GetConnection(), d.Retry)
	}
	p, ok := d.Registry.Snapshot().Current(dockervolume.PluginType, name)
	if !ok {
		return nil, fmt.Errorf("driver %q: %w", name, discovery.ErrNotFound)
	}
	return clientOf(p.GetName(), p.GetConnection(), d.Retry)
}

// All implements Drivers; plugins whose address is unusable are left out.
func (d RegistryDrivers) All() map[string]*dockervolume.Client {
	out := map[string]*dockervolume.Client{}
	for _, p := range d.Registry.Snapshot().List(dockervolume.PluginType) {
		if c, err := clientOf(p.GetName(), p.GetConnection(), d.Retry); err == nil {
			out[p.GetName()] = c
		}
	}
	return out
}

// clientOf returns a client for plugin name at the registry's address ci,
// retrying as r says.
func clientOf(name string, ci *messages.ConnectionInfo, r dockervolume.Retry) (*dockervolume.Client, error) {
	c, err := discovery.FromConnectionInfo(name, ci)
	if err != nil {
		return nil, fmt.Errorf("driver %q: %w", name, err)
	}
	return dockervolume.NewClient(c).WithRetry(r), nil
}

// Config configures the volume service. Bucket and Drivers are required.
type Config struct {
	// Bucket holds the volume records (Bucket in the agent's store).
	Bucket storage.Bucket
	// Drivers finds volume plugins by name.
	Drivers Drivers
	// Logger receives the service's log lines; nil discards them.
	Logger hclog.Logger
	// OpTimeout bounds one operation, driver lookup included (default DefaultOpTimeout).
	OpTimeout time.Duration
	// Name is the actor's name (default DefaultName).
	Name string
	// DefaultDriver is the driver of a create that names none, as dockerd's
	// "local" is (default DefaultDriver). It must be registered then: a
	// create without a driver is refused at once otherwise.
	DefaultDriver string
}

// DefaultDriver is the default Config.DefaultDriver, dockerd's.
const DefaultDriver = "local"

func (c Config) validate() error {
	var problems []error
	if c.Bucket == nil {
		problems = append(problems, errors.New("a Bucket is required: give the store's Bucket"))
	}
	if c.Drivers == nil {
		problems = append(problems, errors.New("a Drivers is required: give RegistryDrivers"))
	}
	if c.OpTimeout < 0 {
		problems = append(problems, fmt.Errorf("OpTimeout is %v, must not be negative", c.OpTimeout))
	}
	if err := errors.Join(problems...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

func (c Config) withDefaults() Config {
	c.Logger = cmp.Or[hclog.Logger](c.Logger, hclog.NewNullLogger()).Named("docker-volumes")
	c.OpTimeout = cmp.Or(c.OpTimeout, DefaultOpTimeout)
	c.Name = cmp.Or(c.Name, DefaultName)
	c.DefaultDriver = cmp.Or(c.DefaultDriver, DefaultDriver)
	return c
}

// Volume is a volume as the service shows it.
type Volume struct {
	Name   string `json:"name"`
	Driver string `json:"driver"`
	// Scope is the driver's ("local" or "global"), when it answered.
	Scope string `json:"scope,omitempty"`
	// Mountpoint is where the volume is mounted, when it is.
	Mountpoint string            `json:"mountpoint,omitempty"`
	CreatedAt  time.Time         `json:"created_at,omitzero"`
	Options    map[string]string `json:"options,omitempty"`
	// Labels are the volume's labels: AnonymousLabel for an anonymous one.
	Labels map[string]string `json:"labels,omitempty"`
	// Mounts counts the mounts of each mount ID.
	Mounts map[string]int `json:"mounts,omitempty"`
	// PendingMounts are mount IDs whose Mount was under way when the agent
	// stopped: the plugin may hold them. Unmount them to clear them.
	PendingMounts []string `json:"pending_mounts,omitempty"`
	// Status is the driver's own information (VolumeDriver.Get).
	Status map[string]any `json:"status,omitempty"`
	// Known says the service has a record of the volume; a volume only a
	// driver's List gave is not known until it is created or mounted.
	Known bool `json:"known"`
	// Error says why the driver could not be asked, when it could not.
	Error string `json:"error,omitempty"`
}

// List is the answer of List.
type List struct {
	Volumes []Volume `json:"volumes"`
	// Warnings name the drivers whose List failed, as dockerd's do.
	Warnings []string `json:"warnings,omitempty"`
}

func (r *record) info() Volume {
	v := Volume{Name: r.Name, Driver: r.Driver, CreatedAt: r.CreatedAt, Options: maps.Clone(r.Options), Labels: maps.Clone(r.Labels), Known: true}
	for id, m := range r.Mounts {
		if m.Pending {
			v.PendingMounts = append(v.PendingMounts, id)
			continue
		}
		if v.Mounts == nil {
			v.Mounts = map[string]int{}
		}
		v.Mounts[id] = m.Count
		v.Mountpoint = cmp.Or(v.Mountpoint, m.Mountpoint)
	}
	return v
}

// Service is the Go facade over the volume service actor. The actor owns
// the Docker volumes of this node, as dockerd's volume store does:
//   - Each name maps to one driver. A name the service has no record of is
//     asked of every driver's Get, and the one driver that knows it is
//     recorded.
//   - Mounts are counted by mount ID, and a volume in use cannot be removed.
//   - Every change is in the store before it is answered. The service loads
//     the store at start, so it knows its mounts after a restart.
//
// Its methods are safe for concurrent use. Each checks its arguments
// before anything is sent.
type Service struct {
	system *actor.ActorSystem
	pid    *actor.PID
	cfg    Config
}

// Start loads the volume records and starts the service actor.
func Start(system *actor.ActorSystem, cfg Config) (*Service, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	records, err := loadRecords(cfg.Bucket)
	if err != nil {
		return nil, err
	}
	var running sync.WaitGroup // the goroutines of every incarnation
	props := actor.PropsFromProducer(func() actor.Actor { return newVolumesActor(cfg, records, &running) },
		actor.WithReceiverMiddleware(actors.PanicStack(cfg.Logger)))
	pid, err := system.Root.SpawnNamed(props, cfg.Name)
	if err != nil {
		return nil, fmt.Errorf("start actor %q: %w", cfg.Name, err)
	}
	cfg.Logger.Info("docker volume service started", "volumes", len(records))
	return &Service{system: system, pid: pid, cfg: cfg}, nil
}

// Create creates volume name on driver with opts, and answers it with its
// driver's scope. Creating a volume that exists with the same driver
// returns it, as dockerd does; with another driver it is ErrNameConflict.
// As in dockerd, an empty name makes an anonymous volume, named by 64 random
// hex digits and labelled AnonymousLabel, and an empty driver is the
// DefaultDriver, when it is registered.
func (v *Service) Create(ctx context.Context, name, driver string, opts map[string]string) (Volume, error) {
	var labels map[string]string
	if name == "" {
		name, labels = anonymousName(), map[string]string{AnonymousLabel: ""}
	}
	if driver == "" {
		if _, ok := v.cfg.Drivers.All()[v.cfg.DefaultDriver]; !ok {
			return Volume{}, fmt.Errorf("%w: no driver named, and the default driver %q is not registered; name one",
				dockervolume.ErrInvalidArgument, v.cfg.DefaultDriver)
		}
		driver = v.cfg.DefaultDriver
	}
	if err := errors.Join(dockervolume.ValidateVolumeName(name), dockervolume.ValidateDriver(driver), dockervolume.ValidateOptions(opts)); err != nil {
		return Volume{}, err
	}
	r, err := v.ask(ctx, &volumeRequest{op: opCreate, name: name, driver: driver, opts: maps.Clone(opts), labels: labels})
	return r.volume, err
}

// AnonymousLabel is the label of an anonymous volume (one created without
// a name), with an empty value, as dockerd labels one
// (com.docker.volume.anonymous): docker volume prune removes only those
// unless told -a.
const AnonymousLabel = "com.docker.volume.anonymous"

// Inspect returns volume name, with what its driver says of it.
func (v *Service) Inspect(ctx context.Context, name string) (Volume, error) {
	if err := dockervolume.ValidateVolumeName(name); err != nil {
		return Volume{}, err
	}
	r, err := v.ask(ctx, &volumeRequest{op: opInspect, name: name})
	return r.volume, err
}

// List returns every volume the service knows and every volume a driver
// lists, each with its driver's scope, sorted by name.
func (v *Service) List(ctx context.Context) (List, error) {
	r, err := v.ask(ctx, &volumeRequest{op: opList})
	return r.list, err
}

// Remove removes volume name from its driver and from the store;
// ErrVolumeInUse while any mount ID holds it.
func (v *Service) Remove(ctx context.Context, name string) error {
	if err := dockervolume.ValidateVolumeName(name); err != nil {
		return err
	}
	_, err := v.ask(ctx, &volumeRequest{op: opRemove, name: name})
	return err
}

// ForceRemove removes volume name as dockerd's "volume rm -f" does: a volume
// that does not exist is no error, and a driver that fails to remove it (or
// is gone) does not keep its record, which is dropped; the driver's error
// is returned all the same. A volume in use is still ErrVolumeInUse.
func (v *Service) ForceRemove(ctx context.Context, name string) error {
	if err := dockervolume.ValidateVolumeName(name); err != nil {
		return err
	}
	_, err := v.ask(ctx, &volumeRequest{op: opForceRemove, name: name})
	return err
}

// Mount mounts volume name for mount ID id and returns its mount point.
// The driver hears of an ID's first mount only; later ones are counted.
func (v *Service) Mount(ctx context.Context, name, id string) (string, error) {
	if err := errors.Join(dockervolume.ValidateVolumeName(name), dockervolume.ValidateMountID(id)); err != nil {
		return "", err
	}
	r, err := v.ask(ctx, &volumeRequest{op: opMount, name: name, id: id})
	return r.volume.Mountpoint, err
}

// Unmount undoes one mount of volume name by id; the driver hears of the
// ID's last unmount only. ErrNotMounted when id does not hold it.
func (v *Service) Unmount(ctx context.Context, name, id string) error {
	if err := errors.Join(dockervolume.ValidateVolumeName(name), dockervolume.ValidateMountID(id)); err != nil {
		return err
	}
	_, err := v.ask(ctx, &volumeRequest{op: opUnmount, name: name, id: id})
	return err
}

// Path returns the mount point of volume name as its driver gives it
// (VolumeDriver.Path), empty when it is not mounted.
func (v *Service) Path(ctx context.Context, name string) (string, error) {
	if err := dockervolume.ValidateVolumeName(name); err != nil {
		return "", err
	}
	r, err := v.ask(ctx, &volumeRequest{op: opPath, name: name})
	return r.volume.Mountpoint, err
}

// Shutdown stops the service, cancelling the operations in flight and
// waiting for them. Records stay in the store. A second call returns nil.
func (v *Service) Shutdown() error { return v.system.Root.StopFuture(v.pid).Wait() }

// ask sends req to the actor and waits for its answer. The operation goes
// on when ctx ends first: its outcome shows in the volume.
func (v *Service) ask(ctx context.Context, req *volumeRequest) (volumeReply, error) {
	answer, err := actors.Ask(ctx, v.system, v.pid, func(replyTo *actor.PID) any {
		req.replyTo = replyTo
		return req
	})
	if errors.Is(err, actors.ErrTargetGone) {
		return volumeReply{}, fmt.Errorf("%w: %w", ErrShutDown, err)
	}
	if err != nil {
		return volumeReply{}, fmt.Errorf("waiting for the volume service's answer: %w", err)
	}
	r := answer.(*volumeReply)
	return *r, r.err
}

// anonymousName is the name of an anonymous volume: 64 random hex digits,
// never all decimal, as dockerd's stringid.GenerateRandomID makes them.
func anonymousName() string {
	for {
		b := make([]byte, 32)
		_, _ = rand.Read(b) // crypto/rand.Read never fails
		if name := hex.EncodeToString(b); strings.Trim(name, "0123456789") != "" {
			return name
		}
	}
}
