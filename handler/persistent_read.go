package handler

import (
	"bufio"
	"bytes"
	"errors"
	"time"

	touba "github.com/touba/touba-trigger"
)

// readLoop reads response lines until stdout ends, each bounded by
// max_payload_bytes.
func (p *proc) readLoop() {
	defer close(p.readDone)
	limit := p.r.spec.MaxPayload
	br := bufio.NewReaderSize(p.c.stdout, 64<<10)
	var long []byte // a line longer than br's buffer, so far
	for {
		chunk, err := br.ReadSlice('\n')
		line := chunk
		if long != nil || errors.Is(err, bufio.ErrBufferFull) {
			long = append(long, chunk...)
			line = long
		}
		if int64(len(bytes.TrimRight(line, "\r\n"))) > limit {
			p.mu.Lock()
			p.failLocked(touba.Errorf(touba.EHandlerPayloadTooLarge,
				"handler process %d wrote a line over max_payload_bytes %d; process group killed", p.pid, limit))
			p.mu.Unlock()
			p.r.forget(p)
			return
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		long = nil
		if len(bytes.TrimSpace(line)) > 0 {
			p.deliver(line)
		}
		if err != nil {
			p.stdoutEnded()
			return
		}
	}
}

// stdoutEnded ends a process that closed its stdout and lives on: it can
// answer nothing more.
func (p *proc) stdoutEnded() {
	select {
	case <-p.c.exited:
		return
	case <-time.After(ioGrace):
	}
	p.mu.Lock()
	p.failLocked(touba.Errorf(touba.EHandlerFailed,
		"handler process %d closed its stdout and did not exit; process group killed", p.pid))
	p.mu.Unlock()
	p.r.forget(p)
}

// deliver hands a response line to the call it answers. A line that
// answers no call in flight ends the process (SPEC §4.1); once the process
// is ending, answers no longer count.
func (p *proc) deliver(line []byte) {
	w, werr, perr := parseResponse(line)
	p.mu.Lock()
	if p.failErr != nil {
		p.mu.Unlock()
		return
	}
	var c *pcall
	if perr == nil {
		c = p.pending[w.CallID]
	}
	if c == nil {
		// The line's content stays out of the error: it may hold anything.
		err := touba.Errorf(touba.EHandlerProtocolError,
			"handler process %d wrote a response for a call_id not in flight; process group killed", p.pid)
		if perr != nil {
			err = touba.Errorf(touba.EHandlerProtocolError,
				"handler process %d wrote a line that is not a response (%v); process group killed", p.pid, perr)
		}
		p.failLocked(err)
		p.mu.Unlock()
		p.r.forget(p)
		return
	}
	delete(p.pending, w.CallID)
	p.answered++
	p.settleLocked()
	p.mu.Unlock()
	c.done <- interpretParsed(c.req, w, werr)
}

// supervise waits for the process to exit, reads what it wrote before,
