package server

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/httpjson"
)

// While a node waits for its database at start (openDatabase: from its
// first failed try on, so a database that answers costs nothing here), its
// port is bound and answers (SPEC §8): /healthz 200, the process is
// alive; /readyz and every webhook 503 TriggerUnavailable with Retry-After,
// so a load balancer keeps the node out and a sender retries, instead of a
// refused connection or a hang. Once the stores are open the same listeners
// go to the real server (start), which binds nothing a second time: no
// moment without a listener, and socket activation keeps its sockets.

// waitRetryAfter is the Retry-After of the answers while waiting, seconds.
const waitRetryAfter = 5

type waitServer struct {
	ln, mln   net.Listener
	srv, msrv *http.Server
	served    sync.WaitGroup
}

// serveWhileWaiting takes the listeners and answers on them until
// stopWaiting.
func (s *Server) serveWhileWaiting() error {
	ln, mln, err := s.listen()
	if err != nil {
		return err
	}
	w := &waitServer{ln: ln, mln: mln}
	w.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second,
		Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/healthz" && r.Method == http.MethodGet {
				httpjson.Write(rw, http.StatusOK, map[string]string{"status": "ok"})
				return
			}
			rw.Header().Set("Retry-After", strconv.Itoa(waitRetryAfter))
			httpjson.Error(rw, http.StatusServiceUnavailable, touba.ETriggerUnavailable,
				"waiting for the database at start", "")
		})}
	w.served.Add(1)
	go func() {
		defer w.served.Done()
		_ = w.srv.Serve(keepOpen{ln})
	}()
	if mln != nil {
		// The metrics too: a scrape says the node is up, and not ready.
		w.msrv = &http.Server{Handler: s.metrics.Handler(), ReadHeaderTimeout: 5 * time.Second}
		w.served.Add(1)
		go func() {
			defer w.served.Done()
			_ = w.msrv.Serve(keepOpen{mln})
		}()
	}
	s.waiting = w
	s.log.Info().Str("addr", ln.Addr().String()).Msg("listening while waiting for the database: /healthz 200, everything else 503")
	return nil
}

// stopWaiting ends the waiting answers and returns the listeners, open, for
// the real server; nil when serveWhileWaiting did not run.
func (s *Server) stopWaiting() (ln, mln net.Listener) {
	w := s.waiting
	if w == nil {
		return nil, nil
	}
	s.waiting = nil
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = w.srv.Shutdown(ctx) // closes keepOpen: Accept returns, the socket stays
	if w.msrv != nil {
		_ = w.msrv.Shutdown(ctx)
	}
	w.served.Wait()
	for _, l := range []net.Listener{w.ln, w.mln} {
		if d, ok := l.(interface{ SetDeadline(time.Time) error }); ok {
			_ = d.SetDeadline(time.Time{})
		}
	}
	return w.ln, w.mln
}

// closeWaiting closes the listeners of a start that failed while waiting.
func (s *Server) closeWaiting() {
	if ln, mln := s.stopWaiting(); ln != nil {
		ln.Close()
		if mln != nil {
			mln.Close()
		}
	}
}

// keepOpen is a listener whose Close ends a pending Accept (by a deadline
// in the past) without closing the socket, so the waiting server can hand
// it on.
type keepOpen struct{ net.Listener }

func (k keepOpen) Close() error {
	if d, ok := k.Listener.(interface{ SetDeadline(time.Time) error }); ok {
		return d.SetDeadline(time.Unix(1, 0))
	}
	return nil
}
