package handler

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/touba/touba-trigger/protocol"
)

// Main serves tool on stdin and stdout in the mode the host asked for
// (see Serve) and exits: 0 once every request was answered, 1 if the tool
// is invalid or stdout failed. SIGTERM and SIGINT cancel the ctx of calls in
// flight so they can answer; a second signal kills the process.
func Main(tool Tool) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	go func() {
		<-ctx.Done()
		stop() // restore the default action for a second signal
	}()
	err := Serve(ctx, tool, os.Stdin, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", tool.Ref, err)
		os.Exit(1)
	}
}

// Serve serves tool on in and out: with the environment variable
// TOUBA_HANDLER_MODE=persistent it calls ServePersistent, otherwise
// ServeOne, so one handler binary works both ways (SPEC §4.1).
func Serve(ctx context.Context, tool Tool, in io.Reader, out io.Writer) error {
	if os.Getenv(ModeEnv) == protocol.ModePersistent {
		return ServePersistent(ctx, tool, in, out)
	}
	return ServeOne(ctx, tool, in, out)
}

// ServeOne reads exactly one JSON request from in, runs it and writes one
// response to out. Whatever the request holds, it answers (an unreadable
// request gets HandlerProtocolError); it returns an error only when tool
// is invalid or out fails.
func ServeOne(ctx context.Context, tool Tool, in io.Reader, out io.Writer) error {
	if err := tool.validate(); err != nil {
		return err
	}
	// Decode one document rather than read to EOF: the host need not close
	// stdin for the handler to answer.
	var raw json.RawMessage
	if err := json.NewDecoder(in).Decode(&raw); err != nil {
		var line []byte
		if errors.Is(err, io.EOF) {
			line = encodeLine(failure(CodeProtocolError, "no request on stdin"))
		} else {
			line = encodeLine(failure(CodeProtocolError, "request is not JSON: "+err.Error()))
		}
		return writeAll(out, line)
	}
	return writeAll(out, tool.handle(ctx, raw, false))
}

// ServePersistent reads one compact JSON request per line from in and runs
// each in its own goroutine, writing each response as one line with a
// top-level call_id (the request's context.call_id); lines are written
// whole, one at a time, in the order calls finish. When in reaches EOF it
// waits for the calls in flight and returns. When ctx is cancelled it stops
// reading, waits for the calls in flight (which see the cancellation) and
// returns ctx.Err(); a Read already blocked on in is abandoned.
func ServePersistent(ctx context.Context, tool Tool, in io.Reader, out io.Writer) error {
	if err := tool.validate(); err != nil {
		return err
	}
	lines := make(chan []byte)
	readDone := make(chan error, 1)
	stopRead := make(chan struct{})
	go func() {
		br := bufio.NewReader(in)
		for {
			line, err := br.ReadBytes('\n')
			if len(bytes.TrimSpace(line)) > 0 {
				select {
				case lines <- line:
				case <-stopRead:
					return
				}
			}
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				readDone <- err
				return
			}
		}
	}()

	w := &lineWriter{w: out}
	var calls sync.WaitGroup
	var err error
loop:
	for {
		select {
		case line := <-lines:
			calls.Go(func() { w.write(tool.handle(ctx, line, true)) })
		case rerr := <-readDone:
			if rerr != nil {
				err = fmt.Errorf("read requests: %w", rerr)
			}
			break loop
		case <-ctx.Done():
			close(stopRead)
			err = ctx.Err()
			break loop
		}
	}
	calls.Wait()
	if werr := w.failed(); werr != nil {
		return werr
	}
	return err
}

// lineWriter serialises whole response lines onto one writer and keeps the
// first write error.
type lineWriter struct {
	mu  sync.Mutex
	w   io.Writer
	err error
}

func (l *lineWriter) write(line []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return
	}
	l.err = writeAll(l.w, line)
}

func (l *lineWriter) failed() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func writeAll(w io.Writer, b []byte) error {
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("write response: %w", err)
	}
	return nil
}
