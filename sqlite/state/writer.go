package state

import (
	"context"
	"time"
)

// logWriter is the one goroutine that writes the delivery log. It takes
// rows in batches (bounded in count and bytes) and, while a bound is
// exceeded or an age check is due, prunes in small transactions between
// batches: a prune never holds the file's writer for long, so neither
// these inserts nor the run checkpoints sharing the connection stall.
func (s *State) logWriter() {
	defer close(s.done)
	tick := time.NewTicker(s.opts.PruneEvery)
	defer tick.Stop()
	for {
		var (
			d        *waiting
			ok       = true
			ack      chan struct{}
			pruneAck chan error
		)
		if s.pruneDue(s.totals) {
			select {
			case d, ok = <-s.rows:
			case ack = <-s.flushes:
			case pruneAck = <-s.prunes:
			case <-tick.C:
				s.ageDue, s.pruneFailed = true, false
				continue
			default:
				s.pruneOnce()
				continue
			}
		} else {
			select {
			case d, ok = <-s.rows:
			case ack = <-s.flushes:
			case pruneAck = <-s.prunes:
			case <-tick.C:
				s.ageDue, s.pruneFailed = true, false
				continue
			}
		}
		switch {
		case !ok:
			return
		case pruneAck != nil:
			pruneAck <- s.pruneAll()
			continue
		}
		if !s.gather(d, ack != nil) {
			if ack != nil {
				close(ack)
			}
			return
		}
		if ack != nil {
			close(ack)
		}
	}
}

// gather writes first and the rows behind it in batches. With all set it
// writes every row buffered now (for Flush), else one batch at most. It
// reports false when the buffer was closed.
func (s *State) gather(first *waiting, all bool) bool {
	batch := make([]*waiting, 0, 64)
	var bytes int64
	if first != nil {
		batch, bytes = append(batch, first), first.held
	}
	for {
		if len(batch) >= maxLogBatch || bytes >= maxLogBatchBytes {
			s.write(batch)
			batch, bytes = batch[:0], 0
			if !all {
				return true
			}
		}
		select {
		case d, ok := <-s.rows:
			if !ok {
				s.write(batch)
				return false
			}
			batch, bytes = append(batch, d), bytes+d.held
		default:
			s.write(batch)
			return true
		}
	}
}

// Prune applies the log's bounds now (age included) and returns when they
// hold. The writer runs it, between batches, in small transactions.
func (s *State) Prune(ctx context.Context) error {
	ack := make(chan error, 1)
	select {
	case s.prunes <- ack:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.done:
		return errClosed
	}
	select {
	case err := <-ack:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
