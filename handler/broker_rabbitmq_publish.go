package handler

import (
	"context"
	"errors"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	touba "github.com/touba/touba-trigger"
)

// A rabbitmq publish and how its end is judged (SPEC §2.2).

// Call publishes req's message, mandatory and persistent, and waits for the
// broker's confirm (SPEC §2.2): applied on an ack; not_applied
// BrokerRejected on a nack, a mandatory return (no queue bound for the
// routing key) or the broker closing the channel over the publish (no such
// exchange, access refused); not_applied unsent when there is no
// connection; unknown when the connection is lost after publishing or no
// confirm comes within the timeout.
func (p *rabbitPub) Call(ctx context.Context, req *Request, dispatched func() error) *Result {
	if res := refuseUnsent(req, p.closed.Load(), p.spec.MaxPayload); res != nil {
		return res
	}
	key, msg, terr := p.message(req)
	if terr != nil {
		return fail(req, touba.EffectNotApplied, false, terr)
	}
	log := p.log.With().Str("call_id", req.Context.CallID).Str("routing_key", key).Logger()
	if res := p.notConnected(req); res != nil {
		return res
	}
	pc, err := p.channel()
	if err != nil {
		// Opening a channel sends nothing of the message.
		if res := p.notConnected(req); res != nil {
			return res
		}
		return unsent(req, touba.EHandlerFailed, "rabbitmq: cannot open a channel: %v", err)
	}
	if err := context.Cause(ctx); err != nil {
		p.release(pc)
		return unsent(req, touba.EHandlerTimeout, "call cancelled before sending: %v", err)
	}
	if err := dispatched(); err != nil {
		p.release(pc)
		return fail(req, touba.EffectNotApplied, false, hookError(err))
	}
	tag := pc.ch.GetNextPublishSeqNo()
	if _, err := pc.ch.PublishWithDeferredConfirm(p.spec.Exchange, key, true, false, msg); err != nil {
		go pc.ch.Close()
		if errors.Is(err, amqp.ErrClosed) {
			// The channel was closed before anything was written.
			return unsent(req, touba.EHandlerFailed, "rabbitmq: not sent, the channel is closed: %v", err)
		}
		p.stats.Unknown.Add(1)
		log.Warn().Err(err).Msg("rabbitmq publish failed while writing")
		return fail(req, touba.EffectUnknown, true, touba.Errorf(touba.EHandlerFailed,
			"rabbitmq: the publish to %s failed while being written: %v", rabbitWhere(p.spec.Exchange, key), err))
	}
	res, clean := p.await(ctx, req, pc, tag, key)
	if clean {
		p.release(pc)
	} else {
		go pc.ch.Close() // its confirm may still come: it takes no other publish
	}
	switch {
	case res.OK:
		p.stats.Published.Add(1)
	case res.Err.Code == touba.EBrokerRejected:
		p.stats.Rejected.Add(1)
		log.Warn().Str("code", res.Err.Code).Str("outcome", res.Outcome).Msg("rabbitmq refused the publish")
	default:
		p.stats.Unknown.Add(1)
		log.Warn().Str("code", res.Err.Code).Str("outcome", res.Outcome).Msg("rabbitmq publish unconfirmed")
	}
	return res
}

// await waits for the confirm of the publish tagged tag on pc and judges
// it; clean is whether the channel can take another publish.
func (p *rabbitPub) await(ctx context.Context, req *Request, pc *pubChannel, tag uint64, key string) (*Result, bool) {
	where := rabbitWhere(p.spec.Exchange, key)
	timer := time.NewTimer(p.spec.Timeout)
	defer timer.Stop()
	var returned *amqp.Return
	for {
		select {
		case r, ok := <-pc.returns:
			if !ok {
				return p.lost(req, pc, where), false
			}
			returned = &r
		case c, ok := <-pc.confirms:
			if !ok {
				return p.lost(req, pc, where), false
			}
			if c.DeliveryTag != tag {
				// Not this publish's (cannot happen: one publish per
				// channel): the channel is not trusted further.
				return fail(req, touba.EffectUnknown, true, touba.Errorf(touba.EHandlerFailed,
					"rabbitmq: confirm of delivery tag %d, expected %d", c.DeliveryTag, tag)), false
			}
			// A mandatory message that no queue took is returned before
			// it is acknowledged, on the same channel: the return, if any,
			// has been handed over before the confirm was.
			select {
			case r, ok := <-pc.returns:
				if ok {
					returned = &r
				}
			default:
			}
			switch {
			case returned != nil:
				return fail(req, touba.EffectNotApplied, true, touba.Errorf(touba.EBrokerRejected,
					"rabbitmq returned the message: no queue is bound to %s (%d %s)", where, returned.ReplyCode, returned.ReplyText)), true
			case !c.Ack:
				return fail(req, touba.EffectNotApplied, true, touba.Errorf(touba.EBrokerRejected,
					"rabbitmq refused the message (nack) on %s", where)), true
			}
			return brokerApplied(req, "rabbitmq:"+p.spec.Exchange+":"+key, map[string]any{
				"exchange": p.spec.Exchange, "routing_key": key, "message_id": effectID(req)}), true
		case err := <-pc.closes:
			return p.closedOver(req, pc, err, where), false
		case <-timer.C:
			return fail(req, touba.EffectUnknown, true, touba.Errorf(touba.EHandlerTimeout,
				"rabbitmq: no confirm from the broker within %s for %s", p.spec.Timeout, where)), false
		case <-ctx.Done():
			return fail(req, touba.EffectUnknown, true, touba.Errorf(touba.EHandlerTimeout,
				"rabbitmq: the call ended before the broker confirmed the publish to %s: %v", where, context.Cause(ctx))), false
		}
	}
}

// lost is the Result of a publish whose channel's listeners were closed:
// the reason is on pc.closes.
func (p *rabbitPub) lost(req *Request, pc *pubChannel, where string) *Result {
	var err *amqp.Error
	select {
	case err = <-pc.closes:
	default:
	}
	return p.closedOver(req, pc, err, where)
}

// closedOver judges a publish whose channel closed before its confirm. The
// broker closes a channel over a publish it refuses (a soft error on the
// channel alone, the connection open: no such exchange, access refused, a
// message over the size limit): the message was not routed. A lost
// connection closes its channels with its own, hard, error instead, and
// leaves the publish unknown.
func (p *rabbitPub) closedOver(req *Request, pc *pubChannel, err *amqp.Error, where string) *Result {
	if err != nil && err.Server && err.Recover {
		return fail(req, touba.EffectNotApplied, true, touba.Errorf(touba.EBrokerRejected,
			"rabbitmq refused the publish to %s: %d %s", where, err.Code, err.Reason))
	}
	why := "the connection was lost"
	if err != nil {
		why += ": " + err.Error()
	}
	return fail(req, touba.EffectUnknown, true, touba.Errorf(touba.EHandlerFailed,
		"rabbitmq: %s after publishing to %s, before the broker's confirm", why, where))
}
