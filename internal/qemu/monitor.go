package qemu

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"time"
)

// NICID is the QEMU device id of Config.Net's NIC, the name Monitor.SetLink
// takes.
const NICID = "nic0"

// maxQMPMessage bounds one QMP message (a line of JSON); replies to the
// commands tests send are a few hundred bytes.
const maxQMPMessage = 1 << 20

// Monitor is a client of a VM's QMP monitor (Config.Monitor): tests use it
// to change the VM while it runs, e.g. unplug the network cable.
type Monitor struct {
	mu   sync.Mutex // one command at a time
	conn net.Conn
	r    *bufio.Reader
}

// qmpMessage is one message QEMU sends: the greeting, a command's return
// or error, or an asynchronous event.
type qmpMessage struct {
	QMP    json.RawMessage `json:"QMP"`
	Return json.RawMessage `json:"return"`
	Error  *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`
	Event string `json:"event"`
}

// parseQMPMessage decodes one line from QEMU. A message that is none of
// greeting, return, error or event is an error.
func parseQMPMessage(line []byte) (qmpMessage, error) {
	var m qmpMessage
	if err := json.Unmarshal(line, &m); err != nil {
		return m, fmt.Errorf("qmp: bad message %.80q: %w", line, err)
	}
	if m.QMP == nil && m.Return == nil && m.Error == nil && m.Event == "" {
		return m, fmt.Errorf("qmp: message %.80q is no greeting, return, error or event", line)
	}
	return m, nil
}

// readMessage reads one newline-terminated message, at most maxQMPMessage
// bytes.
func readMessage(r *bufio.Reader) (qmpMessage, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line)+len(chunk) > maxQMPMessage {
			return qmpMessage{}, fmt.Errorf("qmp: message over %d bytes", maxQMPMessage)
		}
		line = append(line, chunk...)
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			return qmpMessage{}, fmt.Errorf("qmp: read: %w", err)
		}
		break
	}
	return parseQMPMessage(bytes.TrimSpace(line))
}

// dialMonitor connects to the QMP socket at path, waiting for QEMU to
// create it, and negotiates capabilities.
func dialMonitor(ctx context.Context, path string) (*Monitor, error) {
	var conn net.Conn
	for {
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", path)
		if err == nil {
			conn = c
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("qmp: connect %s: %w (last: %v)", path, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	m := &Monitor{conn: conn, r: bufio.NewReader(conn)}
	if err := m.handshake(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	return m, nil
}

func (m *Monitor) handshake(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { m.conn.SetDeadline(time.Now()) })
	defer stop()
	greeting, err := readMessage(m.r)
	if err != nil {
		return fmt.Errorf("qmp: greeting: %w", err)
	}
	if greeting.QMP == nil {
		return errors.New("qmp: QEMU sent no greeting")
	}
	_, err = m.execute(ctx, "qmp_capabilities", nil)
	return err
}

// Execute runs a QMP command and returns its "return" value; a QMP error
// reply becomes an error naming the command. Events arriving meanwhile are
// skipped.
func (m *Monitor) Execute(ctx context.Context, command string, args any) (json.RawMessage, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	stop := context.AfterFunc(ctx, func() { m.conn.SetDeadline(time.Now()) })
	defer stop()
	return m.execute(ctx, command, args)
}

func (m *Monitor) execute(ctx context.Context, command string, args any) (json.RawMessage, error) {
	req := map[string]any{"execute": command}
	if args != nil {
		req["arguments"] = args
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("qmp: %s: %w", command, err)
	}
	if _, err := m.conn.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("qmp: %s: %w", command, errors.Join(err, ctx.Err()))
	}
	for {
		msg, err := readMessage(m.r)
		if err != nil {
			return nil, fmt.Errorf("qmp: %s: %w", command, errors.Join(err, ctx.Err()))
		}
		switch {
		case msg.Error != nil:
			return nil, fmt.Errorf("qmp: %s: %s: %s", command, msg.Error.Class, msg.Error.Desc)
		case msg.Return != nil:
			return msg.Return, nil
		}
		// an event (or a stray greeting): not the reply
	}
}

// SetLink plugs (up) or unplugs the cable of the NIC with QEMU id name
// (NICID for Config.Net); the guest sees the carrier change.
func (m *Monitor) SetLink(ctx context.Context, name string, up bool) error {
	_, err := m.Execute(ctx, "set_link", map[string]any{"name": name, "up": up})
	return err
}

// Cont resumes a VM started with Config.Paused.
func (m *Monitor) Cont(ctx context.Context) error {
	_, err := m.Execute(ctx, "cont", nil)
	return err
}

// Close closes the connection; QEMU keeps running.
func (m *Monitor) Close() error { return m.conn.Close() }

// qmpSocket is where a VM's QMP socket lives.
func qmpSocket(tmpDir string) string { return filepath.Join(tmpDir, "qmp.sock") }

// Monitor connects to the VM's QMP monitor (Config.Monitor must be set).
// Each call opens its own connection; close it when done.
func (vm *VM) Monitor(ctx context.Context) (*Monitor, error) {
	if !vm.monitor {
		return nil, errors.New("qmp: the VM was started without Config.Monitor")
	}
	return dialMonitor(ctx, qmpSocket(vm.tmpDir))
}
