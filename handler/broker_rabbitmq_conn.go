package handler

import (
	"errors"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	touba "github.com/touba/touba-trigger"
)

// The rabbitmq binding's connection: kept up by one goroutine that
// reconnects with backoff, and its pool of channels in confirm mode.

// keep connects, and connects again each time the connection is lost, with
// backoff (100 ms doubling to 5 s), until Close. first is closed after the
// first try.
func (p *rabbitPub) keep(first chan struct{}) {
	defer p.wg.Done()
	fails, closedAfterLogin, connected := 0, 0, false
	for {
		conn, err := amqp.DialConfig(p.uri, p.cfg)
		refused := refusedLogin(err)
		if refused == errClosedAfterLogin {
			closedAfterLogin++
		} else {
			closedAfterLogin = 0
		}
		p.mu.Lock()
		p.lastErr, p.refused = err, nil
		// The broker's own refusal counts at once; a connection closed
		// without a word after the credentials, on two tries in a row (a
		// broker stopping mid-handshake closes it so too, once).
		if refused == errRefusedByBroker || refused == errClosedAfterLogin && closedAfterLogin >= 2 {
			p.refused = err
		}
		p.mu.Unlock()
		if first != nil {
			close(first)
			first = nil
		}
		if err != nil {
			fails++
			if fails == 1 || fails%20 == 0 {
				p.log.Warn().Err(err).Int("tries", fails).Msg("cannot connect to rabbitmq; trying again")
			}
			select {
			case <-p.done:
				return
			case <-time.After(min(100*time.Millisecond<<min(fails-1, 6), 5*time.Second)):
			}
			continue
		}
		how := "connected"
		if connected {
			how = "reconnected"
		}
		fails, connected = 0, true
		closes := conn.NotifyClose(make(chan *amqp.Error, 1))
		blocks := conn.NotifyBlocked(make(chan amqp.Blocking, 4))
		p.mu.Lock()
		p.conn, p.blocked = conn, ""
		p.mu.Unlock()
		p.log.Info().Msg("rabbitmq " + how)
		if p.closed.Load() {
			conn.Close()
		}
		p.watch(closes, blocks)
		if p.closed.Load() {
			return
		}
		select {
		case <-p.done:
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// watch follows the connection until it closes: the broker blocking and
// unblocking publishers, then the closing, which drops the idle channels.
func (p *rabbitPub) watch(closes chan *amqp.Error, blocks chan amqp.Blocking) {
	for {
		select {
		case b, ok := <-blocks:
			if !ok {
				blocks = nil // closed with the connection; closes says why
				continue
			}
			p.mu.Lock()
			p.blocked = ""
			if b.Active {
				p.blocked = b.Reason
				if p.blocked == "" {
					p.blocked = "blocked"
				}
			}
			p.mu.Unlock()
			p.log.Warn().Bool("blocked", b.Active).Str("reason", b.Reason).Msg("rabbitmq blocks or unblocks publishers (a resource alarm)")
		case err := <-closes:
			p.mu.Lock()
			p.conn, p.blocked = nil, ""
			idle := p.idle
			p.idle = nil
			p.mu.Unlock()
			for _, pc := range idle {
				pc.ch.Close()
			}
			if err != nil && !p.closed.Load() {
				p.log.Warn().Err(err).Msg("rabbitmq connection lost; reconnecting")
			}
			return
		}
	}
}

// How a connect's error reads as a refused login.
const (
	notRefused = iota
	// errRefusedByBroker: the broker's own connection.close with
	// ACCESS_REFUSED or NOT_ALLOWED (the vhost), or no SASL mechanism in
	// common.
	errRefusedByBroker
	// errClosedAfterLogin: the connection closed without a word right
	// after the credentials (or the vhost), which is how RabbitMQ refuses
	// a bad login to a client that does not ask for the reason (the
	// library's ErrCredentials and ErrVhost).
	errClosedAfterLogin
)

// refusedLogin tells whether, and how, a connect failed because the broker
// refused the login or the vhost.
func refusedLogin(err error) int {
	if err == nil {
		return notRefused
	}
	if errors.Is(err, amqp.ErrCredentials) || errors.Is(err, amqp.ErrVhost) {
		return errClosedAfterLogin
	}
	if errors.Is(err, amqp.ErrSASL) {
		return errRefusedByBroker
	}
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Server && (ae.Code == amqp.AccessRefused || ae.Code == amqp.NotAllowed) {
		return errRefusedByBroker
	}
	return notRefused
}

// channel takes an idle channel of the current connection, or opens one
// (within the publish timeout: opening is a round trip the broker may
// never answer); nil with the reason when there is none.
func (p *rabbitPub) channel() (*pubChannel, error) {
	p.mu.Lock()
	conn := p.conn
	if conn == nil {
		p.mu.Unlock()
		return nil, errNotConnected
	}
	if n := len(p.idle); n > 0 {
		pc := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return pc, nil
	}
	p.mu.Unlock()
	type opened struct {
		pc  *pubChannel
		err error
	}
	done := make(chan opened, 1)
	go func() {
		pc, err := openChannel(conn)
		done <- opened{pc, err}
	}()
	timer := time.NewTimer(p.spec.Timeout)
	defer timer.Stop()
	select {
	case o := <-done:
		return o.pc, o.err
	case <-timer.C:
		go func() {
			if o := <-done; o.pc != nil {
				o.pc.ch.Close()
			}
		}()
		return nil, errors.New("the broker did not open a channel within " + p.spec.Timeout.String())
	}
}

// openChannel opens a channel on conn in confirm mode, with its listeners.
func openChannel(conn *amqp.Connection) (*pubChannel, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	pc := &pubChannel{conn: conn, ch: ch, closes: ch.NotifyClose(make(chan *amqp.Error, 1))}
	if err := ch.Confirm(false); err != nil {
		go ch.Close()
		return nil, err
	}
	pc.returns = ch.NotifyReturn(make(chan amqp.Return, 4))
	pc.confirms = ch.NotifyPublish(make(chan amqp.Confirmation, 4))
	return pc, nil
}

// release gives a channel whose publish ended cleanly back to the pool, or
// closes it when its connection is gone.
func (p *rabbitPub) release(pc *pubChannel) {
	p.mu.Lock()
	if pc.conn == p.conn && !p.closed.Load() && !pc.ch.IsClosed() {
		p.idle = append(p.idle, pc)
		pc = nil
	}
	p.mu.Unlock()
	if pc != nil {
		go pc.ch.Close() // a round trip; the call does not wait on it
	}
}

var errNotConnected = errors.New("not connected")

// notConnected is the Result of a call made while there is no usable
// connection (unsent), or nil when there is one.
func (p *rabbitPub) notConnected(req *Request) *Result {
	p.mu.Lock()
	conn, blocked, lastErr, refused := p.conn, p.blocked, p.lastErr, p.refused
	p.mu.Unlock()
	switch {
	case conn != nil && blocked != "":
		// A publish now would wait in the broker's TCP pushback and end
		// unknown: it is not sent.
		return unsent(req, touba.EHandlerFailed, "rabbitmq blocks publishers: %s", blocked)
	case conn != nil && !conn.IsClosed():
		return nil
	}
	if fe := p.dialer.forbidden(); fe != nil {
		p.stats.Rejected.Add(1)
		return unsent(req, touba.EEgressForbidden, "rabbitmq: %v", fe)
	}
	if refused != nil {
		p.stats.Rejected.Add(1)
		return unsent(req, touba.EBrokerRejected, "rabbitmq refused the login: %v", refused)
	}
	why := "not connected"
	if lastErr != nil {
		why += ": " + lastErr.Error()
	}
	return unsent(req, touba.EHandlerFailed, "rabbitmq %s", why)
}
