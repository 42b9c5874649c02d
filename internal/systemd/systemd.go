// Package systemd speaks systemd's protocols with the standard library
// only: sd_notify (READY=1, STOPPING=1, WATCHDOG=1 on $NOTIFY_SOCKET), the
// watchdog, and socket activation ($LISTEN_FDS descriptors from 3 on, named
// by $LISTEN_FDNAMES).
package systemd

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// Notifier sends sd_notify datagrams; without $NOTIFY_SOCKET it does
// nothing.
type Notifier struct {
	addr *net.UnixAddr
}

// NewNotifier reads $NOTIFY_SOCKET and removes it from the environment, so
// that no child inherits it.
func NewNotifier() *Notifier {
	path := os.Getenv("NOTIFY_SOCKET")
	os.Unsetenv("NOTIFY_SOCKET")
	if path == "" {
		return &Notifier{}
	}
	if path[0] == '@' {
		// An abstract socket: its name starts with a NUL byte.
		path = "\x00" + path[1:]
	}
	return &Notifier{addr: &net.UnixAddr{Name: path, Net: "unixgram"}}
}

// Notify sends one state line such as "READY=1".
func (n *Notifier) Notify(state string) error {
	if n.addr == nil {
		return nil
	}
	c, err := net.DialUnix("unixgram", nil, n.addr)
	if err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(state)); err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	return nil
}

// WatchdogInterval returns how often to ping the watchdog: half of
// $WATCHDOG_USEC, when it is set for this process.
func WatchdogInterval() (time.Duration, bool) {
	usec, err := strconv.ParseInt(os.Getenv("WATCHDOG_USEC"), 10, 64)
	if err != nil || usec <= 0 {
		return 0, false
	}
	if pid := os.Getenv("WATCHDOG_PID"); pid != "" && pid != strconv.Itoa(os.Getpid()) {
		return 0, false
	}
	return time.Duration(usec) * time.Microsecond / 2, true
}

// RunWatchdog pings the watchdog every interval while healthy answers
// within it, so that a daemon whose files stopped answering is restarted
// by systemd rather than kept alive by a timer.
func (n *Notifier) RunWatchdog(ctx context.Context, every time.Duration, healthy func(context.Context) error, log zerolog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		hctx, cancel := context.WithTimeout(ctx, every)
		err := healthy(hctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			log.Warn().Err(err).Msg("not healthy; watchdog not pinged")
		} else if err := n.Notify("WATCHDOG=1"); err != nil {
			log.Warn().Err(err).Msg("watchdog ping failed")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// listenFDsStart is the first descriptor systemd passes.
const listenFDsStart = 3

// Activated holds the listeners systemd passed, by name: "http" for
// webhooks (or the first unnamed one), "metrics" for /metrics.
type Activated map[string]net.Listener

// Listeners takes the descriptors of socket activation. When
// $LISTEN_PID is set it must be this process; when it is absent the
// descriptors are taken anyway, so that a wrapper or a test that cannot know
// the child's pid before starting it can pass them. The variables are
// removed from the environment afterwards.
func Listeners(log zerolog.Logger) (Activated, error) {
	n, err := strconv.Atoi(os.Getenv("LISTEN_FDS"))
	pid := os.Getenv("LISTEN_PID")
	names := strings.Split(os.Getenv("LISTEN_FDNAMES"), ":")
	for _, v := range []string{"LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES"} {
		os.Unsetenv(v)
	}
	if err != nil || n <= 0 {
		return nil, nil
	}
	if pid != "" && pid != strconv.Itoa(os.Getpid()) {
		log.Warn().Str("listen_pid", pid).Msg("LISTEN_FDS is meant for another process; ignored")
		return nil, nil
	}
	out := Activated{}
	for i := 0; i < n; i++ {
		fd := listenFDsStart + i
		syscall.CloseOnExec(fd)
		name := ""
		if i < len(names) {
			name = names[i]
		}
		switch name {
		case "", "unknown", "touba-trigger.socket":
			name = "http"
		}
		f := os.NewFile(uintptr(fd), "listen-fd-"+name)
		ln, err := net.FileListener(f)
		f.Close() // FileListener holds its own duplicate
		if err != nil {
			return nil, fmt.Errorf("socket activation: descriptor %d (%s): %w", fd, name, err)
		}
		if _, dup := out[name]; dup {
			log.Warn().Int("fd", fd).Str("name", name).Msg("a second activated socket of that name; ignored")
			ln.Close()
			continue
		}
		out[name] = ln
	}
	return out, nil
}

// Take returns the activated listener of name, or nil.
func (a Activated) Take(name string) net.Listener {
	ln := a[name]
	delete(a, name)
	return ln
}
