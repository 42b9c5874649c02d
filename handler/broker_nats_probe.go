package handler

import (
	"time"
)

// natsPingInterval is how often an idle nats connection is pinged; two
// pings unanswered end it (a connection found dead within 20-30 s).
const natsPingInterval = 10 * time.Second

// probe asks the server for a PONG after a publish went unacknowledged,
// one probe at a time. The server answers a PING itself, whatever its
// streams are doing, so no PONG within the publish timeout means the
// connection carries nothing (a black hole: no reset ever comes), and it
// is replaced at once instead of at the pings' pace: every publish on it
// would otherwise time out and end unknown. A slow stream on a live
// connection answers the PING and is left alone.
func (p *natsPub) probe() {
	if p.closed.Load() || !p.probing.CompareAndSwap(false, true) {
		return
	}
	defer p.probing.Store(false)
	if err := p.nc.FlushTimeout(p.spec.Timeout); err == nil || !p.nc.IsConnected() || p.closed.Load() {
		return
	}
	p.log.Warn().Dur("waited", p.spec.Timeout).Msg("nats server answers no ping; reconnecting")
	if err := p.nc.ForceReconnect(); err != nil {
		p.log.Warn().Err(err).Msg("nats reconnect refused")
	}
}
