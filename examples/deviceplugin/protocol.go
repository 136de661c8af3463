package deviceplugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
)

// Status is a device plugin's answer to a health check: the protocol is
// one JSON request, {"method":"Health"}, and one JSON Status in answer, on
// a new connection to the plugin's unix socket.
type Status struct {
	Healthy bool     `json:"healthy"`
	Devices []string `json:"devices"`
	Error   string   `json:"error,omitempty"`
}

type request struct {
	Method string `json:"method"`
}

// Check asks the plugin at socket for its health, within ctx.
func Check(ctx context.Context, socket string) (Status, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return Status{}, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	var s Status
	if err := json.NewEncoder(conn).Encode(request{Method: "Health"}); err != nil {
		return Status{}, err
	}
	if err := json.NewDecoder(conn).Decode(&s); err != nil {
		return Status{}, fmt.Errorf("reading the answer: %w", err)
	}
	return s, nil
}

// Plugin is a fake device plugin: it answers health checks on a unix
// socket with the status its owner sets. Close stops it.
type Plugin struct {
	ln     net.Listener
	mu     sync.Mutex
	status Status
	served sync.WaitGroup
}

// Serve starts a healthy plugin with devices on socket.
func Serve(socket string, devices ...string) (*Plugin, error) {
	ln, err := net.Listen("unix", socket)
	if err != nil {
		return nil, fmt.Errorf("deviceplugin: %w", err)
	}
	p := &Plugin{ln: ln, status: Status{Healthy: true, Devices: devices}}
	p.served.Go(p.accept)
	return p, nil
}

// SetHealth sets what the plugin answers from now on.
func (p *Plugin) SetHealth(healthy bool, why string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.status.Healthy, p.status.Error = healthy, why
}

// Close stops the plugin and waits for the answers in flight.
func (p *Plugin) Close() error {
	err := p.ln.Close()
	p.served.Wait()
	return err
}

func (p *Plugin) accept() {
	for {
		conn, err := p.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		p.served.Go(func() { p.answer(conn) })
	}
}

func (p *Plugin) answer(conn net.Conn) {
	defer conn.Close()
	var req request
	if err := json.NewDecoder(conn).Decode(&req); err != nil || req.Method != "Health" {
		_ = json.NewEncoder(conn).Encode(Status{Error: fmt.Sprintf("unknown request %q", req.Method)})
		return
	}
	p.mu.Lock()
	s := p.status
	p.mu.Unlock()
	_ = json.NewEncoder(conn).Encode(s)
}
