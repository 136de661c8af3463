package discovery

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/pkg/plugins"
	"github.com/docker/go-plugins-helpers/sdk"
	"github.com/docker/go-plugins-helpers/volume"
	"github.com/stretchr/testify/require"

	actorprobe "github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/storage"
	"github.com/plugvisor/plugvisor/supervisor"
)

// The cross-check gives one directory layout to Docker's own discovery
// (github.com/docker/docker/pkg/plugins) and to this package's, and compares
// what they find. Docker's directories are hard-coded, so its side runs in a
// child process (this test binary again) in a private mount namespace, where
// the test's directories are bind-mounted over Docker's.

// crossCheckEnv, when set, holds the child's crossCheckSetup as JSON.
const crossCheckEnv = "PLUGVISOR_DOCKER_CROSSCHECK"

// crossCheckMarker starts the child's line of results on its stdout.
const crossCheckMarker = "PLUGVISOR-CROSSCHECK-RESULT "

// crossCheckSetup tells the child what to mount.
type crossCheckSetup struct {
	Binds   map[string]string // Docker's directory → the test's directory to mount over it
	Scratch string            // an empty directory for the child's tmpfs
	HostNS  string            // the parent's mount namespace, which the child must have left
	// LateSocket is where the child starts the "late" plugin, once
	// plugvisor's fast retries for it are over.
	LateSocket string
}

// foundPlugin is one activated plugin, as either side saw it.
type foundPlugin struct {
	Name       string
	Addr       string
	Implements []string
}

// crossCheckReport is what one side found.
type crossCheckReport struct {
	Plugins       []foundPlugin
	VolumeDrivers []string // plugins implementing VolumeDriver
	Broken        []string // names found but not usable
}

type crossCheckResult struct {
	Docker, Plugvisor crossCheckReport
	// LateFound is what plugvisor's discovery actor registered for the
	// late plugin: its address, after its fast retries had given up.
	LateFound string
}

func TestDockerCrossCheck(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the cross-check with Docker's discovery needs root, for a private mount namespace and bind mounts")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("the cross-check with Docker's discovery needs unshare(1) (util-linux)")
	}
	hostNS, err := os.Readlink("/proc/self/ns/mnt")
	require.NoError(t, err)
	docker := DockerDirs()
	dockerPaths := append(append([]string{}, docker.Sockets...), docker.Specs...)
	existedBefore := map[string]bool{}
	for _, p := range dockerPaths {
		_, err := os.Stat(p)
		existedBefore[p] = err == nil
	}

	root := tempDir(t)
	run, etc, usr := filepath.Join(root, "run"), filepath.Join(root, "etc"), filepath.Join(root, "usr")
	other, scratch := filepath.Join(root, "o"), filepath.Join(root, "scratch")
	for _, d := range []string{run, etc, usr, other, scratch} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	serveManifest := func(path string, ifaces ...string) {
		serve(t, path, sdk.NewHandler(manifestJSON(ifaces...)))
	}
	serve(t, filepath.Join(run, "alpha.sock"), volume.NewHandler(activationOnly{}))
	serveManifest(filepath.Join(run, "beta", "beta.sock"), "NetworkDriver")
	serveManifest(filepath.Join(run, "shadow.sock"), "VolumeDriver", "IpamDriver")
	for sock, iface := range map[string]string{
		"shadow": "authz", "gamma": "authz", "delta": "LogDriver", "eps": "MetricsCollector",
		"eta-spec": "VolumeDriver", "eta-json": "NetworkDriver", "zeta-json": "IpamDriver", "zeta-spec": "LogDriver",
	} {
		serveManifest(filepath.Join(other, sock+".sock"), iface)
	}
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	serveOn(t, tcp, volume.NewHandler(activationOnly{}))
	// Two TLS servers: one that wants a client certificate, one that does not.
	pki := newTestPKI(t)
	mtls, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	serveOn(t, tls.NewListener(mtls, pki.serverConfig), sdk.NewHandler(manifestJSON("authz")))
	anyClient := pki.serverConfig.Clone()
	anyClient.ClientAuth = tls.NoClientCert
	plainTLS, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	serveOn(t, tls.NewListener(plainTLS, anyClient), volume.NewHandler(activationOnly{}))
	unixAddr := func(sock string) string { return "unix://" + filepath.Join(other, sock+".sock") }
	certs := `"CertFile": "` + pki.cert + `", "KeyFile": "` + pki.key + `"`
	tree{
		"etc/shadow.spec":          unixAddr("shadow"), // loses to run/shadow.sock
		"etc/gamma.spec":           unixAddr("gamma") + "\n",
		"etc/tcpvol.spec":          "tcp://" + tcp.Addr().String(),
		"etc/delta.json":           `{"Name": "delta", "Addr": "` + unixAddr("delta") + `"}`,
		"usr/epsilon/epsilon.spec": unixAddr("eps"),
		"etc/eta.spec":             unixAddr("eta-spec"), // beats etc/eta.json
		"etc/eta.json":             `{"Addr": "` + unixAddr("eta-json") + `"}`,
		"etc/zeta.json":            `{"Addr": "` + unixAddr("zeta-json") + `"}`, // beats usr/zeta.spec
		"usr/zeta.spec":            unixAddr("zeta-spec"),
		"etc/broken.spec":          "no scheme here",
		"etc/late.spec":            unixAddr("late"), // starts after the fast retries
		// Docker's address and TLS rules:
		"etc/httpvol.spec":     "http://" + tcp.Addr().String(),
		"etc/httpsspec.spec":   "https://" + plainTLS.Addr().String(),                                                    // a .spec skips verification
		"etc/tcptls.json":      `{"Addr": "tcp://` + tcp.Addr().String() + `", "TLSConfig": {"CAFile": "/nonexistent"}}`, // unused, but loaded: broken
		"etc/httptls.json":     `{"Addr": "http://` + tcp.Addr().String() + `", "TLSConfig": {` + certs + `}}`,           // so is http
		"etc/tlsca.json":       `{"Addr": "https://` + mtls.Addr().String() + `", "TLSConfig": {"CAFile": "` + pki.ca + `", ` + certs + `}}`,
		"etc/tlsnoca.json":     `{"Addr": "https://` + mtls.Addr().String() + `", "TLSConfig": {` + certs + `}}`, // no CA: no verification
		"etc/tlsinsecure.json": `{"Addr": "https://` + mtls.Addr().String() + `", "TLSConfig": {"InsecureSkipVerify": true, "CAFile": "/nonexistent", ` + certs + `}}`,
	}.build(t, root)

	setup, err := json.Marshal(crossCheckSetup{
		Binds:      map[string]string{docker.Sockets[0]: run, docker.Specs[0]: etc, docker.Specs[1]: usr},
		Scratch:    scratch,
		HostNS:     hostNS,
		LateSocket: filepath.Join(other, "late.sock"),
	})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, unshare, "--mount", "--propagation", "private",
		os.Args[0], "-test.run=^TestDockerCrossCheckHelper$", "-test.count=1")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ROOTLESSKIT_STATE_DIR=") { // would make Docker look in rootless dirs
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, crossCheckEnv+"="+string(setup))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "child:\n%s\n%s", out, stderr.String())
	var result crossCheckResult
	for line := range strings.Lines(string(out)) {
		if rest, ok := strings.CutPrefix(line, crossCheckMarker); ok {
			require.NoError(t, json.Unmarshal([]byte(rest), &result))
		}
	}

	dockerSock := func(p string) string { return "unix://" + filepath.Join(docker.Sockets[0], p) }
	want := crossCheckReport{
		Plugins: []foundPlugin{
			{"alpha", dockerSock("alpha.sock"), []string{"VolumeDriver"}},
			{"beta", dockerSock("beta/beta.sock"), []string{"NetworkDriver"}},
			{"delta", unixAddr("delta"), []string{"LogDriver"}},
			{"epsilon", unixAddr("eps"), []string{"MetricsCollector"}},
			{"eta", unixAddr("eta-spec"), []string{"VolumeDriver"}},
			{"gamma", unixAddr("gamma"), []string{"authz"}},
			{"httpsspec", "https://" + plainTLS.Addr().String(), []string{"VolumeDriver"}},
			{"httptls", "http://" + tcp.Addr().String(), []string{"VolumeDriver"}},
			{"httpvol", "http://" + tcp.Addr().String(), []string{"VolumeDriver"}},
			{"late", unixAddr("late"), []string{"VolumeDriver"}},
			{"shadow", dockerSock("shadow.sock"), []string{"VolumeDriver", "IpamDriver"}},
			{"tcpvol", "tcp://" + tcp.Addr().String(), []string{"VolumeDriver"}},
			{"tlsca", "https://" + mtls.Addr().String(), []string{"authz"}},
			{"tlsinsecure", "https://" + mtls.Addr().String(), []string{"authz"}},
			{"tlsnoca", "https://" + mtls.Addr().String(), []string{"authz"}},
			{"zeta", unixAddr("zeta-json"), []string{"IpamDriver"}},
		},
		VolumeDrivers: []string{"alpha", "eta", "httpsspec", "httptls", "httpvol", "late", "shadow", "tcpvol"},
		Broken:        []string{"broken", "tcptls"},
	}
	require.Equal(t, want, result.Docker, "Docker finds the layout as built")
	require.Equal(t, result.Docker, result.Plugvisor, "plugvisor finds what Docker finds")
	require.Equal(t, filepath.Join(other, "late.sock"), result.LateFound,
		"plugvisor's discovery registered the plugin that started after its fast retries")

	for _, p := range dockerPaths {
		if !existedBefore[p] {
			require.NoDirExists(t, p, "the cross-check left nothing on the host")
		}
	}
}

// TestDockerCrossCheckHelper is the child side of TestDockerCrossCheck.
func TestDockerCrossCheckHelper(t *testing.T) {
	raw := os.Getenv(crossCheckEnv)
	if raw == "" {
		t.Skip("runs only as the child process of TestDockerCrossCheck")
	}
	var setup crossCheckSetup
	require.NoError(t, json.Unmarshal([]byte(raw), &setup))
	ns, err := os.Readlink("/proc/self/ns/mnt")
	require.NoError(t, err)
	require.NotEqual(t, setup.HostNS, ns, "refusing to mount anything outside a private mount namespace")
	require.NoError(t, syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""))
	require.NoError(t, syscall.Mount("tmpfs", setup.Scratch, "tmpfs", 0, "mode=0700"))

	targets := make([]string, 0, len(setup.Binds))
	for target := range setup.Binds {
		targets = append(targets, target)
	}
	sort.Strings(targets)
	overlaid := map[string]bool{}
	for _, target := range targets {
		bindOver(t, target, setup.Binds[target], setup.Scratch, overlaid)
	}

	late := startLateWatch(t)
	docker := dockerFinds(t) // Docker's activation retries until the late plugin answers
	out, err := json.Marshal(crossCheckResult{Docker: docker, Plugvisor: plugvisorFinds(t), LateFound: late.found(t)})
	require.NoError(t, err)
	fmt.Println(crossCheckMarker + string(out))
}

// lateWatch is plugvisor's discovery actor over Docker's directories,
// started in the child before anything else looks at them.
type lateWatch struct {
	d *Discovery
}

// startLateWatch starts discovery with fast retries that give up within
// milliseconds, waits until they have given up on the late plugin, and
// then starts that plugin: only the slow retry can find it.
func startLateWatch(t *testing.T) lateWatch {
	t.Helper()
	var setup crossCheckSetup
	require.NoError(t, json.Unmarshal([]byte(os.Getenv(crossCheckEnv)), &setup))
	system := actorprobe.NewSystem(t)
	bucket, err := storage.NewMemory().Bucket(registry.BucketName)
	require.NoError(t, err)
	reg, err := registry.New(system, registry.Config{Bucket: bucket})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, reg.Shutdown()) })
	d, err := Start(system, Config{Dirs: DockerDirs(), Registry: reg, ActivateTimeout: time.Second,
		Retry:     supervisor.Spec{MaxRestarts: 1, Within: time.Minute, InitialDelay: 10 * time.Millisecond, MaxDelay: 10 * time.Millisecond},
		SlowRetry: 300 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Shutdown()) })
	require.Eventually(t, func() bool {
		for _, p := range d.Plugins() {
			if p.GetName() == "late" && p.GetFailures() >= 2 {
				return true
			}
		}
		return false
	}, 30*time.Second, 10*time.Millisecond, "the late plugin's fast retries never gave up")
	serve(t, setup.LateSocket, volume.NewHandler(activationOnly{}))
	return lateWatch{d: d}
}

// found waits for the late plugin's registration and returns its socket.
func (w lateWatch) found(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := w.d.Get(ctx, "late", "VolumeDriver")
	require.NoError(t, err)
	return p.GetConnection().GetSocketPath()
}

// bindOver bind-mounts source over target. A target that does not exist is
// made inside an overlay of its nearest existing ancestor, whose upper layer
// lives in the scratch tmpfs: the host's file system is never written.
func bindOver(t *testing.T, target, source, scratch string, overlaid map[string]bool) {
	t.Helper()
	if _, err := os.Stat(target); errors.Is(err, fs.ErrNotExist) {
		base := filepath.Dir(target)
		for {
			if _, err := os.Stat(base); err == nil {
				break
			}
			base = filepath.Dir(base)
		}
		if !overlaid[base] {
			layer := filepath.Join(scratch, strconv.Itoa(len(overlaid)))
			upper, work := filepath.Join(layer, "upper"), filepath.Join(layer, "work")
			require.NoError(t, os.MkdirAll(upper, 0o755))
			require.NoError(t, os.MkdirAll(work, 0o755))
			opts := "lowerdir=" + base + ",upperdir=" + upper + ",workdir=" + work
			require.NoError(t, syscall.Mount("overlay", base, "overlay", 0, opts), "overlay %s", base)
			overlaid[base] = true
		}
		require.NoError(t, os.MkdirAll(target, 0o755))
	}
	require.NoError(t, syscall.Mount(source, target, "", syscall.MS_BIND, ""), "bind %s over %s", source, target)
}

// dockerFinds runs Docker's discovery and activation over Docker's directories.
func dockerFinds(t *testing.T) crossCheckReport {
	reg := plugins.NewLocalRegistry()
	names, err := reg.Scan()
	require.NoError(t, err)
	sort.Strings(names)
	var rep crossCheckReport
	for _, name := range slices.Compact(names) {
		p, err := reg.Plugin(name)
		if err != nil {
			rep.Broken = append(rep.Broken, name)
			continue
		}
		client, err := plugins.NewClient(p.Addr, p.TLSConfig)
		if err != nil {
			rep.Broken = append(rep.Broken, name) // its TLS settings do not load
			continue
		}
		var m plugins.Manifest
		require.NoError(t, client.CallWithOptions("Plugin.Activate", nil, &m, plugins.WithRequestTimeout(5*time.Second)))
		rep.Plugins = append(rep.Plugins, foundPlugin{Name: name, Addr: p.Addr, Implements: m.Implements})
	}
	vols, err := reg.GetAll("VolumeDriver")
	require.NoError(t, err)
	for _, p := range vols {
		rep.VolumeDrivers = append(rep.VolumeDrivers, p.Name())
	}
	// GetAll lists a plugin once for every file that names it (a socket and
	// a shadowed spec file, say), all resolving to the same plugin: compare
	// the set.
	sort.Strings(rep.VolumeDrivers)
	rep.VolumeDrivers = slices.Compact(rep.VolumeDrivers)
	return rep
}

// plugvisorFinds runs this package's Scan and Activate over Docker's directories.
func plugvisorFinds(t *testing.T) crossCheckReport {
	candidates, errs := Scan(DockerDirs())
	var rep crossCheckReport
	for _, err := range errs {
		var pe *PluginError
		require.ErrorAs(t, err, &pe)
		rep.Broken = append(rep.Broken, pe.Name)
	}
	for _, c := range candidates {
		m, err := Activate(context.Background(), c, ActivateOptions{Timeout: 5 * time.Second})
		require.NoError(t, err)
		rep.Plugins = append(rep.Plugins, foundPlugin{Name: c.Name, Addr: c.Addr, Implements: m.Implements})
		if slices.Contains(TypesFor(m), TypeDockerVolume) {
			rep.VolumeDrivers = append(rep.VolumeDrivers, c.Name)
		}
	}
	return rep
}
