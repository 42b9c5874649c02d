package handler_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler"
)

// secretPath and secretQuery make a webhook URL like a Slack incoming
// webhook's: the path and the query are the credential.
const (
	secretPath  = "/services/T0000/B0000/SECRETPATHxyz"
	secretQuery = "token=SECRETQUERYxyz&sig=abc%2Fdef"
)

// noSecret fails when s holds any part of the secret path or query, and
// when it does not name host (an operator must still see where it went).
func noSecret(tb testing.TB, what, s, host string) {
	tb.Helper()
	for _, p := range []string{"SECRETPATH", "SECRETQUERY", "T0000", "abc%2Fdef", "abc/def"} {
		if strings.Contains(s, p) {
			tb.Errorf("%s holds %q of the secret URL:\n%s", what, p, s)
		}
	}
	if !strings.Contains(s, host) {
		tb.Errorf("%s does not name the host %s:\n%s", what, host, s)
	}
}

func TestRedactURL(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"https://hooks.slack.com/services/T0/B0/XXXX", "https://hooks.slack.com/…"},
		{"https://api.example:8443/hook?token=abc", "https://api.example:8443/…"},
		{"https://api.example?token=abc", "https://api.example/…"},
		{"https://user:pw@api.example/x", "https://api.example/…"},
		{"https://api.example/#frag", "https://api.example/…"},
		{"https://api.example/", "https://api.example/"},
		{"https://api.example", "https://api.example"},
		{"http://[::1]:8080/p", "http://[::1]:8080/…"},
		{"/relative/SECRET", "…"},
		{"http://host/\x00SECRET", "…"},
		{"", "…"},
	} {
		if got := handler.RedactURL(tt.in); got != tt.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestWebhookErrorsRedactURL: whatever way a call to a URL with a secret
// path and query fails (connection lost, refused, a redirect loop of a
// client that follows redirects, a CheckRedirect that quotes the target, a
// redirect not followed), neither the call's error nor a log line at any
// level holds the path or query, and both name the host.
func TestWebhookErrorsRedactURL(t *testing.T) {
	dropping := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			panic(err)
		}
		conn.Close()
	}))
	t.Cleanup(dropping.Close)
	redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Location", secretPath+"/next?"+secretQuery)
		w.WriteHeader(http.StatusFound) // followed as a GET, with no body to rewind
	}))
	t.Cleanup(redirecting.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()

	following := &http.Client{} // the default policy: up to 10 redirects, then an error
	echoing := &http.Client{CheckRedirect: func(r *http.Request, _ []*http.Request) error {
		return errors.New("refusing redirect to " + r.URL.String())
	}}
	for _, tt := range []struct {
		name, base string
		client     *http.Client
		code       string
	}{
		{"connection lost", dropping.URL, nil, touba.EHandlerFailed},
		{"connection refused", closed, nil, touba.EHandlerFailed},
		{"redirect not followed", redirecting.URL, nil, touba.EHandlerFailed},
		{"stopped after 10 redirects", redirecting.URL, following, touba.EHandlerFailed},
		{"CheckRedirect quotes the target", redirecting.URL, echoing, touba.EHandlerFailed},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var logs syncBuffer
			req := newRequest(t, `{}`, touba.RetryReconcile)
			r := mustWebhook(t, tt.base+secretPath+"?"+secretQuery, func(s *handler.WebhookSpec) {
				s.Log = zerolog.New(&logs).Level(zerolog.DebugLevel)
				s.Outbound.Client, s.Timeout, s.MaxTries = tt.client, 2*time.Second, 2
			})
			res := r.Call(context.Background(), req, func() error { return nil })
			if res.Err == nil || res.Err.Code != tt.code {
				t.Fatalf("err = %v, want code %s", res.Err, tt.code)
			}
			t.Logf("error: %s", res.Err.Message)
			host := strings.TrimPrefix(tt.base, "http://")
			noSecret(t, "the call's error", res.Err.Message, host)
			noSecret(t, "the log", logs.String(), host)
			if !strings.Contains(logs.String(), "webhook try") {
				t.Fatalf("no try logged:\n%s", logs.String())
			}
		})
	}
}
