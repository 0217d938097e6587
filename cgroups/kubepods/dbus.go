package kubepods

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
)

// SystemdConn is the part of systemd's D-Bus API (org.freedesktop.systemd1)
// the systemd driver uses. go-systemd's *dbus.Conn has it; tests pass a
// fake.
type SystemdConn interface {
	StartTransientUnitContext(ctx context.Context, name, mode string, props []sddbus.Property, ch chan<- string) (int, error)
	StartUnitContext(ctx context.Context, name, mode string, ch chan<- string) (int, error)
	SetUnitPropertiesContext(ctx context.Context, name string, runtime bool, props ...sddbus.Property) error
	StopUnitContext(ctx context.Context, name, mode string, ch chan<- string) (int, error)
	ResetFailedUnitContext(ctx context.Context, name string) error
	GetManagerProperty(name string) (string, error)
	Close()
}

// dbusDialTimeout bounds connecting to systemd: its private socket answers
// at once when systemd runs, and a node agent must not hang at start.
const dbusDialTimeout = 10 * time.Second

// dialSystemd connects to systemd: its private socket, which needs no
// dbus-daemon (root only), else the system bus. go-systemd ties the
// connection's life to the dial's context, so the caller passes one that
// lasts as long as the connection should; the dial alone is bounded by
// dbusDialTimeout.
func dialSystemd(ctx context.Context) (*sddbus.Conn, error) {
	type result struct {
		c   *sddbus.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := sddbus.NewSystemdConnectionContext(ctx)
		if err != nil {
			var berr error
			if c, berr = sddbus.NewSystemConnectionContext(ctx); berr != nil {
				err = fmt.Errorf("connect to systemd over D-Bus: %w; %w", err, berr)
			} else {
				err = nil
			}
		}
		done <- result{c, err}
	}()
	t := time.NewTimer(dbusDialTimeout)
	defer t.Stop()
	select {
	case r := <-done:
		return r.c, r.err
	case <-t.C:
		go func() {
			// Close whatever the dial ends with.
			if r := <-done; r.c != nil {
				r.c.Close()
			}
		}()
		return nil, fmt.Errorf("connect to systemd over D-Bus: no answer within %v", dbusDialTimeout)
	}
}

// reconnecting is a SystemdConn that dials again when the connection is
// gone: systemd closes every client's socket on daemon-reexec (an upgrade
// of the systemd package does that), after which every call on the old
// connection fails with godbus.ErrClosed. A call that fails so is retried
// once on a fresh connection, as runc's dbusConnManager.retryOnDisconnect
// does for the kubelet.
type reconnecting struct {
	dial func() (SystemdConn, error)

	mu   sync.Mutex
	conn SystemdConn // nil until dialed, or after a failure
}

func newReconnecting(first SystemdConn, dial func() (SystemdConn, error)) *reconnecting {
	return &reconnecting{dial: dial, conn: first}
}

func (r *reconnecting) get() (SystemdConn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn != nil {
		return r.conn, nil
	}
	c, err := r.dial()
	if err != nil {
		return nil, err
	}
	r.conn = c
	return c, nil
}

// drop forgets c if it is still the current connection.
func (r *reconnecting) drop(c SystemdConn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn == c {
		r.conn = nil
		c.Close()
	}
}

// do runs call on the connection, and once more on a new one when the
// first was closed under it.
func (r *reconnecting) do(call func(SystemdConn) error) error {
	for attempt := 0; ; attempt++ {
		c, err := r.get()
		if err != nil {
			return err
		}
		err = call(c)
		if !errors.Is(err, godbus.ErrClosed) || attempt > 0 {
			return err
		}
		r.drop(c)
	}
}

func (r *reconnecting) StartTransientUnitContext(ctx context.Context, name, mode string, props []sddbus.Property, ch chan<- string) (id int, err error) {
	err = r.do(func(c SystemdConn) error {
		id, err = c.StartTransientUnitContext(ctx, name, mode, props, ch)
		return err
	})
	return id, err
}

func (r *reconnecting) StartUnitContext(ctx context.Context, name, mode string, ch chan<- string) (id int, err error) {
	err = r.do(func(c SystemdConn) error { id, err = c.StartUnitContext(ctx, name, mode, ch); return err })
	return id, err
}

func (r *reconnecting) SetUnitPropertiesContext(ctx context.Context, name string, runtime bool, props ...sddbus.Property) error {
	return r.do(func(c SystemdConn) error { return c.SetUnitPropertiesContext(ctx, name, runtime, props...) })
}

func (r *reconnecting) StopUnitContext(ctx context.Context, name, mode string, ch chan<- string) (id int, err error) {
	err = r.do(func(c SystemdConn) error { id, err = c.StopUnitContext(ctx, name, mode, ch); return err })
	return id, err
}

func (r *reconnecting) ResetFailedUnitContext(ctx context.Context, name string) error {
	return r.do(func(c SystemdConn) error { return c.ResetFailedUnitContext(ctx, name) })
}

func (r *reconnecting) GetManagerProperty(name string) (v string, err error) {
	err = r.do(func(c SystemdConn) error { v, err = c.GetManagerProperty(name); return err })
	return v, err
}

func (r *reconnecting) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn != nil {
		r.conn.Close()
		r.conn = nil
	}
}

// systemdVersion reads the manager's Version property ("\"252.33-1~deb12u1\"")
// and returns its leading number, 0 when it cannot tell.
func systemdVersion(c SystemdConn) int {
	v, err := c.GetManagerProperty("Version")
	if err != nil {
		return 0
	}
	if u, err := strconv.Unquote(v); err == nil {
		v = u
	}
	v = strings.TrimPrefix(strings.TrimSpace(v), "v")
	end := 0
	for end < len(v) && v[end] >= '0' && v[end] <= '9' {
		end++
	}
	n, err := strconv.Atoi(v[:end])
	if err != nil {
		return 0
	}
	return n
}
