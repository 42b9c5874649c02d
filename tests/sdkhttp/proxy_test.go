package sdkhttp_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// The proxy's modes, for the next request.
const (
	modePass      = iota
	modeLoseFirst // forward, then answer 503 in place of the SDK's answer, once
	modeTamper    // change the body's "tamper-me" to "tampered!", keep the signature
)

// exchange is one request the proxy forwarded and what the SDK answered.
type exchange struct {
	key, sig string
	body     []byte // as the daemon sent it
	status   int
	answer   []byte
}

// proxy stands between the daemon and an SDK's server.
type proxy struct {
	srv    *httptest.Server
	target string

	mu   sync.Mutex
	mode int
	seen []exchange
}

func newProxy(t *testing.T, target string) *proxy {
	p := &proxy{target: target}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *proxy) setMode(m int) {
	p.mu.Lock()
	p.mode = m
	p.mu.Unlock()
}

func (p *proxy) exchanges() []exchange {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]exchange(nil), p.seen...)
}

func (p *proxy) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	p.mu.Lock()
	mode := p.mode
	if mode == modeLoseFirst {
		p.mode = modePass
	}
	p.mu.Unlock()
	sent := body
	if mode == modeTamper {
		sent = bytes.Replace(body, []byte("tamper-me"), []byte("tampered!"), 1)
	}
	req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, p.target, bytes.NewReader(sent))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	for _, h := range []string{"Content-Type", "X-Signature", "Idempotency-Key"} {
		if v := r.Header.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	p.mu.Lock()
	p.seen = append(p.seen, exchange{key: r.Header.Get("Idempotency-Key"), sig: r.Header.Get("X-Signature"),
		body: body, status: resp.StatusCode, answer: answer})
	p.mu.Unlock()
	if mode == modeLoseFirst {
		// The SDK applied it; the daemon must not know.
		http.Error(w, "answer lost", http.StatusServiceUnavailable)
		return
	}
	// The answer's headers as a proxy passes them: Touba-Protocol is what
	// tells the daemon the body is a protocol response.
	for _, h := range []string{"Content-Type", "Touba-Protocol"} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(answer)
}
