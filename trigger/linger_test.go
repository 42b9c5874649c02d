package trigger_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/touba/touba-trigger/sqlite/queue"
)

// rawPost opens a connection to addr, writes a POST of n bytes to path
// (with a Content-Length, or chunked), the whole body before reading, then
// reads the answer. It returns the status and error code read, or the
// error that ended the exchange.
func rawPost(addr, path string, n int, chunked bool) (int, string, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(60 * time.Second))
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n", path)
	if chunked {
		head += "Transfer-Encoding: chunked\r\n\r\n"
	} else {
		head += fmt.Sprintf("Content-Length: %d\r\n\r\n", n)
	}
	if _, err := io.WriteString(c, head); err != nil {
		return 0, "", fmt.Errorf("write head: %w", err)
	}
	chunk := []byte(strings.Repeat("a", 64<<10))
	for left := n; left > 0; left -= len(chunk) {
		part := chunk[:min(left, len(chunk))]
		if chunked {
			if _, err := fmt.Fprintf(c, "%x\r\n%s\r\n", len(part), part); err != nil {
				return 0, "", fmt.Errorf("write body at %d: %w", n-left, err)
			}
		} else if _, err := c.Write(part); err != nil {
			return 0, "", fmt.Errorf("write body at %d: %w", n-left, err)
		}
	}
	if chunked {
		if _, err := io.WriteString(c, "0\r\n\r\n"); err != nil {
			return 0, "", fmt.Errorf("write last chunk: %w", err)
		}
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, "", fmt.Errorf("read answer: %w", err)
	}
	defer resp.Body.Close()
	var r reply
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return resp.StatusCode, "", fmt.Errorf("read answer body: %w", err)
	}
	return resp.StatusCode, r.Error.Code, nil
}

// TestOversizedBodyAnswerIsRead: clients that write a whole 8 MiB body
// before reading (declared or chunked) read 413 TriggerPayloadTooLarge,
// not a reset, and the request is logged. Without the lingering close
// the server closes with the body unread and the clients see a reset.
func TestOversizedBodyAnswerIsRead(t *testing.T) {
	f := newFixture(t, queue.Options{})
	addr := strings.TrimPrefix(f.srv.URL, "http://")
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(chunked bool) {
			defer wg.Done()
			status, code, err := rawPost(addr, "/triggers/t/plain", 8<<20, chunked)
			if err == nil && (status != 413 || code != "TriggerPayloadTooLarge") {
				err = fmt.Errorf("got %d %q", status, code)
			}
			if err != nil {
				errs <- fmt.Errorf("chunked=%v: %w", chunked, err)
			}
		}(i%2 == 1)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	n := 0
	for _, r := range f.logRows(t) {
		if r.ErrorCode == "TriggerPayloadTooLarge" {
			n++
		}
	}
	if n != 8 {
		t.Fatalf("%d rows TriggerPayloadTooLarge in the log, want 8", n)
	}
}

// TestLingerIsBounded: a sender that keeps sending past the discard bound
// (16 MiB) is cut off, not read without end; one that stalls is cut off
// after the time bound (5 s).
func TestLingerIsBounded(t *testing.T) {
	f := newFixture(t, queue.Options{})
	addr := strings.TrimPrefix(f.srv.URL, "http://")

	t.Run("bytes", func(t *testing.T) {
		const declared = 256 << 20
		_, _, err := rawPost(addr, "/triggers/t/plain", declared, false)
		if err == nil {
			t.Fatal("a 256 MiB body was read to the end")
		}
		// The error names how far the body got: past the bound by at
		// most the two sockets' buffers, far from the whole body.
		var at int
		if _, scanErr := fmt.Sscanf(err.Error(), "write body at %d", &at); scanErr != nil {
			t.Fatalf("ended by %v, want a failed write", err)
		}
		if at > 64<<20 {
			t.Fatalf("cut off after %d MiB written, want about 16 MiB", at>>20)
		}
		t.Logf("cut off after %d MiB: %v", at>>20, err)
	})

	t.Run("time", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		fmt.Fprintf(c, "POST /triggers/t/plain HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", 8<<20, strings.Repeat("a", 1024))
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 413 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		io.Copy(io.Discard, resp.Body)
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := br.ReadByte(); err == nil {
			t.Fatal("more bytes after the answer")
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatal("connection still open after 30 s of a stalled body")
		}
		if took := time.Since(start); took < 4*time.Second || took > 15*time.Second {
			t.Fatalf("closed after %v, want about 5 s (the time bound)", took)
		}
	})
}
