package discovery

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/names"
	"github.com/plugvisor/plugvisor/registry"
)

// MaxNameLen is the longest plugin name, in bytes, that discovery accepts.
// Docker sets no limit; 128 bytes leaves room for the extension and a
// directory within the 255-byte file-name limit of common file systems.
const MaxNameLen = names.MaxLen

// MaxSocketPathLen is the longest unix socket path, in bytes: sun_path holds
// 108 bytes including the terminating NUL.
const MaxSocketPathLen = names.MaxSocketPathLen

// maxSpecFileSize bounds how much of a spec file is read.
const maxSpecFileSize = 64 << 10

// Sentinel errors for problems with what is on disk. Each problem is reported
// as a *PluginError that matches one of these with errors.Is.
var (
	// ErrNotFound: no file in the configured directories names the plugin.
	ErrNotFound = errclass.New(errclass.NotFound, "plugin not found")
	// ErrInvalidName: the name is empty, too long, not UTF-8, holds a path
	// separator, a control character, or is "." or "..".
	ErrInvalidName = errclass.New(errclass.Invalid, "invalid plugin name")
	// ErrNotSocket: a <name>.sock file is not a unix socket.
	ErrNotSocket = errclass.New(errclass.Invalid, "not a unix socket")
	// ErrUnreadable: a plugin file or directory cannot be read (permission,
	// a symlink loop, a dangling symlink).
	ErrUnreadable = errclass.New(errclass.Invalid, "unreadable plugin file or directory")
	// ErrBadSpec: a .spec or .json file does not hold a usable specification.
	ErrBadSpec = errclass.New(errclass.Invalid, "bad spec file")
	// ErrBadScheme: a spec gives an address with a scheme discovery cannot use.
	ErrBadScheme = errclass.New(errclass.Invalid, "unsupported address scheme")
	// ErrBadAddress: a spec gives an address that is not usable: a relative
	// unix path, a network address without host or port, and the like.
	ErrBadAddress = errclass.New(errclass.Invalid, "bad plugin address")
	// ErrSocketPathTooLong: a unix socket path is longer than MaxSocketPathLen.
	ErrSocketPathTooLong = errclass.New(errclass.Invalid, "unix socket path too long")
	// ErrTLSConfig: TLS settings cannot be used (a missing CA file, a bad
	// key pair, a certificate without its key).
	ErrTLSConfig = errclass.New(errclass.Invalid, "unusable TLS settings")
	// ErrUntrusted: a socket or spec file is owned by a user other than
	// root and the agent's, in a directory its group or others can write:
	// anyone could have put it there.
	ErrUntrusted = errclass.New(errclass.Invalid, "untrusted plugin file")
)

// Kind says which kind of file a Candidate came from.
type Kind string

// The kinds of plugin files.
const (
	// KindSocket is a unix socket <name>.sock (or <name>/<name>.sock) in a socket directory.
	KindSocket Kind = "socket"
	// KindSpec is a <name>.spec text file holding a URL, in a spec directory.
	KindSpec Kind = "spec"
	// KindJSON is a <name>.json file holding {"Name","Addr","TLSConfig"}, in a spec directory.
	KindJSON Kind = "json"
)

// TLSConfig holds the TLS settings of a plugin reached over the network, as
// written in the TLSConfig object of a .json spec file.
type TLSConfig struct {
	InsecureSkipVerify bool
	CAFile             string
	CertFile           string
	KeyFile            string
}

// ClientConfig builds the tls.Config that Activate and Call use, as Docker's
// tlsconfig.Client does: TLS 1.2 or newer; unless InsecureSkipVerify, the
// system roots plus CAFile when one is given; and the client certificate
// CertFile/KeyFile when given. Which settings a spec file gets is decided
// where it is read (see Candidate.TLS).
func (t TLSConfig) ClientConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // Docker's rule for local plugins
	if t.CAFile != "" && !t.InsecureSkipVerify {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, kindErrorf(ErrTLSConfig, "read CA file: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, kindErrorf(ErrTLSConfig, "CA file %s holds no PEM certificate", t.CAFile)
		}
		cfg.RootCAs = pool
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, kindErrorf(ErrTLSConfig, "CertFile and KeyFile must be given together")
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, kindErrorf(ErrTLSConfig, "load client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// Candidate is a plugin found on disk, not yet activated. Exactly one of
// SocketPath and TCPAddr is set.
type Candidate struct {
	// Name is the plugin name: the file name without its extension.
	Name string
	// Kind is the kind of file the plugin was found in.
	Kind Kind
	// Source is the path of that file.
	Source string
	// Addr is the plugin's address as a URL: "unix:///run/docker/plugins/x.sock"
	// for sockets, and the URL written in the spec file otherwise.
	Addr string
	// SocketPath is the absolute path of the plugin's unix socket.
	SocketPath string
	// TCPAddr is the host:port of a plugin reached over the network.
	TCPAddr string
	// TLS, when set, makes calls over TCPAddr use TLS with these settings.
	// As in Docker, it is set for https:// addresses only: a tcp:// or
	// http:// address is plain HTTP whatever the spec says. A .spec file's
	// https:// skips certificate verification, as Docker's local plugins
	// do; a .json file's TLSConfig without a CAFile does too; a .json file
	// without a TLSConfig verifies against the system roots.
	TLS *TLSConfig
}

// ConnectionInfo returns the registry's form of the candidate's address:
// a socket path, or tcp://host:port with TLS settings when the plugin
// speaks https (the registry knows only the tcp scheme).
func (c Candidate) ConnectionInfo() *messages.ConnectionInfo {
	if c.SocketPath != "" {
		return &messages.ConnectionInfo{SocketPath: c.SocketPath}
	}
	ci := &messages.ConnectionInfo{Address: "tcp://" + c.TCPAddr}
	if c.TLS != nil {
		ci.Tls = &messages.TLSConfig{
			InsecureSkipVerify: c.TLS.InsecureSkipVerify,
			CaFile:             c.TLS.CAFile,
			CertFile:           c.TLS.CertFile,
			KeyFile:            c.TLS.KeyFile,
		}
	}
	return ci
}

// FromConnectionInfo builds the candidate for plugin name from the registry's
// form of its address (see ConnectionInfo: a tcp address with TLS settings
// is spoken to over https), with the checks that spec files get. The result
// has no Kind or Source.
func FromConnectionInfo(name string, ci *messages.ConnectionInfo) (Candidate, error) {
	if err := ValidateName(name); err != nil {
		return Candidate{}, &PluginError{Name: name, Kind: ErrInvalidName, Err: err}
	}
	if (ci.GetSocketPath() == "") == (ci.GetAddress() == "") {
		return Candidate{}, &PluginError{Name: name, Kind: ErrBadAddress, Err: errors.New("exactly one of socket path and address must be set")}
	}
	addr := ci.GetAddress()
	if ci.GetSocketPath() != "" {
		addr = "unix://" + ci.GetSocketPath()
	}
	var t *TLSConfig
	if m := ci.GetTls(); m != nil {
		t = &TLSConfig{InsecureSkipVerify: m.GetInsecureSkipVerify(), CAFile: m.GetCaFile(), CertFile: m.GetCertFile(), KeyFile: m.GetKeyFile()}
		if rest, ok := strings.CutPrefix(addr, "tcp://"); ok {
			addr = "https://" + rest
		}
	}
	c := Candidate{Name: name}
	if err := c.setAddr(addr, t); err != nil {
		return Candidate{}, err
	}
	return c, nil
}

// ValidateName reports, wrapped in ErrInvalidName, why name cannot be a
// plugin name (names.Check: empty, too long, not UTF-8, "." or "..", a path
// separator, a control, bidirectional or zero-width character); nil when it
// can.
func ValidateName(name string) error {
	if err := names.Check("plugin name", name); err != nil {
		return &kindError{kind: ErrInvalidName, detail: err}
	}
	return nil
}

// PluginError reports a problem with one plugin. Kind is one of the package's
// sentinels; Err says more, and may wrap an os error (syscall.ELOOP for a
// symlink loop, say). errors.Is matches both.
type PluginError struct {
	Name string // the plugin name, as far as it is known
	Path string // the file the problem is in; empty when none
	Kind error  // a sentinel such as ErrBadSpec
	Err  error  // the details
}

// Error returns e.g. `discovery: bad spec file: plugin "x" (/etc/docker/plugins/x.spec): ...`.
func (e *PluginError) Error() string {
	where := ""
	if e.Path != "" {
		where = " (" + e.Path + ")"
	}
	if e.Err == nil {
		return fmt.Sprintf("%v: plugin %q%s", e.Kind, e.Name, where)
	}
	return fmt.Sprintf("%v: plugin %q%s: %v", e.Kind, e.Name, where, detail(e.Err, e.Kind))
}

// Unwrap returns Kind and Err.
func (e *PluginError) Unwrap() []error { return []error{e.Kind, e.Err} }

// detail is err's text without kind when err is a *kindError of kind,
// which says kind itself: so that messages do not repeat it.
func detail(err, kind error) error {
	if k, ok := err.(*kindError); ok && k.kind == kind {
		return k.detail
	}
	return err
}

// kindError is an error of the package's sentinel kind, caused by detail:
// it reads "<kind>: <detail>" and matches both, and a *PluginError or
// *CallError of the same Kind says only its detail.
type kindError struct{ kind, detail error }

func (e *kindError) Error() string   { return e.kind.Error() + ": " + e.detail.Error() }
func (e *kindError) Unwrap() []error { return []error{e.kind, e.detail} }

// kindErrorf returns a *kindError of kind whose detail is fmt.Errorf(format, args...).
func kindErrorf(kind error, format string, args ...any) error {
	return &kindError{kind: kind, detail: fmt.Errorf(format, args...)}
}

// parseSpecFile reads the .spec or .json file at path and returns the
// candidate it describes.
func parseSpecFile(name, path string, kind Kind) (Candidate, error) {
	perr := func(k, err error) error { return &PluginError{Name: name, Path: path, Kind: k, Err: err} }
	f, err := os.Open(path)
	if err != nil {
		return Candidate{}, perr(ErrUnreadable, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxSpecFileSize+1))
	if err != nil {
		return Candidate{}, perr(ErrUnreadable, err)
	}
	if len(data) > maxSpecFileSize {
		return Candidate{}, perr(ErrBadSpec, fmt.Errorf("larger than %d bytes", maxSpecFileSize))
	}
	c := Candidate{Name: name, Kind: kind, Source: path}
	if kind == KindJSON {
		err = c.parseJSON(data)
	} else {
		err = c.parseSpec(data)
	}
	if err != nil {
		return Candidate{}, err
	}
	return c, nil
}

// parseSpec fills c from the text of a .spec file: one URL, surrounding
// white space ignored.
func (c *Candidate) parseSpec(data []byte) error {
	addr := strings.TrimSpace(string(data))
	if addr == "" {
		return c.errorf(ErrBadSpec, "empty spec file")
	}
	// Docker's local plugins skip certificate verification.
	return c.setAddr(addr, &TLSConfig{InsecureSkipVerify: true})
}

// specJSON is the shape of a .json spec file. As in Docker, Name is ignored:
// the file name names the plugin.
type specJSON struct {
	Name      string
	Addr      string
	TLSConfig *TLSConfig
}

// parseJSON fills c from the text of a .json spec file.
func (c *Candidate) parseJSON(data []byte) error {
	var s specJSON
	if err := json.Unmarshal(data, &s); err != nil {
		return c.errorf(ErrBadSpec, "invalid JSON: %v", err)
	}
	if s.Addr == "" {
		return c.errorf(ErrBadSpec, "no Addr")
	}
	if s.TLSConfig != nil && s.TLSConfig.CAFile == "" {
		s.TLSConfig.InsecureSkipVerify = true // as Docker: no CA, no verification
	}
	return c.setAddr(s.Addr, s.TLSConfig)
}

// setAddr checks the URL addr and fills c's address fields from it.
func (c *Candidate) setAddr(addr string, t *TLSConfig) error {
	u, err := url.Parse(addr)
	if err != nil || u.Scheme == "" {
		return c.errorf(ErrBadSpec, "%q is not a URL", addr)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
		return c.errorf(ErrBadAddress, "%q has user, query or fragment parts", addr)
	}
	c.Addr = addr
	if t != nil && u.Scheme != "https" {
		// As Docker, TLS settings are loaded whatever the scheme, and bad
		// ones make the plugin unusable even where TLS is not spoken (for
		// https, Activate and Call load them).
		if _, err := t.ClientConfig(); err != nil {
			return c.wrap(err)
		}
	}
	switch u.Scheme {
	case "unix":
		// As in Docker, TLS settings do not apply to unix sockets.
		return c.setSocketPath(u)
	case "tcp", "http", "https":
		return c.setTCPAddr(u, t)
	default:
		return c.errorf(ErrBadScheme, "%q: scheme %q is not one of unix, tcp, http, https", addr, u.Scheme)
	}
}

func (c *Candidate) setSocketPath(u *url.URL) error {
	if u.Opaque != "" || u.Host != "" || !filepath.IsAbs(u.Path) {
		return c.errorf(ErrBadAddress, "%q: unix socket path must be absolute (unix:///path)", c.Addr)
	}
	if err := checkSocketPath(u.Path); err != nil {
		return c.wrap(err)
	}
	if err := names.CheckSocketPath("unix socket path", u.Path); err != nil {
		return c.errorf(ErrBadAddress, "%q: %v", c.Addr, err)
	}
	c.SocketPath = u.Path
	return nil
}

func (c *Candidate) setTCPAddr(u *url.URL, t *TLSConfig) error {
	if u.Opaque != "" || u.Hostname() == "" {
		return c.errorf(ErrBadAddress, "%q has no host", c.Addr)
	}
	if u.Path != "" && u.Path != "/" {
		return c.errorf(ErrBadAddress, "%q has a path", c.Addr)
	}
	if host := u.Hostname(); strings.Contains(host, ":") && net.ParseIP(host) == nil || strings.Count(u.Host, ":") > 1 && !strings.HasPrefix(u.Host, "[") {
		return c.errorf(ErrBadAddress, "%q: an IPv6 host goes in brackets, e.g. tcp://[::1]:8080", c.Addr)
	}
	port := u.Port()
	switch {
	case port != "":
	case u.Scheme == "http":
		port = "80"
	case u.Scheme == "https":
		port = "443"
	default:
		return c.errorf(ErrBadAddress, "%q has no port", c.Addr)
	}
	switch {
	case u.Scheme != "https":
		t = nil // as Docker: only https speaks TLS
	case t == nil:
		t = &TLSConfig{}
	}
	tcpAddr := net.JoinHostPort(u.Hostname(), port)
	if n := len("tcp://") + len(tcpAddr); n > registry.MaxAddressLen {
		return c.errorf(ErrBadAddress, "%.32q…: %d bytes as the registry keeps it (tcp://host:port), over the limit of %d", c.Addr, n, registry.MaxAddressLen)
	}
	if t != nil {
		for _, f := range []struct{ field, path string }{{"CAFile", t.CAFile}, {"CertFile", t.CertFile}, {"KeyFile", t.KeyFile}} {
			if len(f.path) > registry.MaxTLSPathLen {
				return c.errorf(ErrTLSConfig, "TLSConfig.%s is %d bytes, over the limit of %d", f.field, len(f.path), registry.MaxTLSPathLen)
			}
		}
	}
	c.TCPAddr = tcpAddr
	c.TLS = t
	return nil
}

// checkSocketPath checks the length of a unix socket path.
func checkSocketPath(path string) error {
	if len(path) > MaxSocketPathLen {
		return kindErrorf(ErrSocketPathTooLong, "%d bytes, more than %d", len(path), MaxSocketPathLen)
	}
	return nil
}

// errorf returns a *PluginError about c.
func (c *Candidate) errorf(kind error, format string, args ...any) error {
	return &PluginError{Name: c.Name, Path: c.Source, Kind: kind, Err: fmt.Errorf(format, args...)}
}

// wrap returns a *PluginError about c whose Kind is the sentinel err wraps.
func (c *Candidate) wrap(err error) error {
	kind := sentinelOf(err, ErrBadAddress, ErrSocketPathTooLong, ErrInvalidName, ErrTLSConfig)
	return &PluginError{Name: c.Name, Path: c.Source, Kind: kind, Err: err}
}

// sentinelOf returns the first of kinds that err wraps, else fallback.
func sentinelOf(err, fallback error, kinds ...error) error {
	for _, k := range kinds {
		if errors.Is(err, k) {
			return k
		}
	}
	return fallback
}
