package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/julienschmidt/httprouter"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/httpjson"
)

// Handler serves api as JSON over HTTP: GETs for listings, POSTs for
// actions. Errors are {"error": {"code", "message"}}; unlike intake's, an
// internal error's message is kept, since only the socket's owner can ask.
func Handler(api API) http.Handler {
	rt := httprouter.New()
	rt.GET("/v1/entries", func(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
		q := r.URL.Query()
		limit, _ := strconv.Atoi(q.Get("limit"))
		reply(w)(api.Entries(r.Context(), EntryFilter{Status: q.Get("status"), TriggerRef: q.Get("trigger_ref"), Held: q.Get("held") == "true",
			After: q.Get("after"), Oldest: q.Get("oldest") == "true", Before: q.Get("before"), Limit: limit}))
	})
	rt.GET("/v1/search", func(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
		q := r.URL.Query()
		req := SearchRequest{QueueID: q.Get("queue_id"), EventID: q.Get("event_id"), Body: q.Get("body"),
			TriggerRef: q.Get("trigger_ref"), Status: q.Get("status")}
		req.MaxScan, _ = strconv.Atoi(q.Get("max_scan"))
		req.Limit, _ = strconv.Atoi(q.Get("limit"))
		if s := q.Get("since"); s != "" {
			t, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				fail(w, badRequest("since %q: %v", s, err))
				return
			}
			req.Since = t
		}
		reply(w)(api.Search(r.Context(), req))
	})
	rt.GET("/v1/entries/:id", func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
		reply(w)(api.Entry(r.Context(), ps.ByName("id")))
	})
	rt.POST("/v1/entries/replay", func(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
		var req ReplayRequest
		if decode(w, r, &req) {
			reply(w)(api.ReplayEntries(r.Context(), req))
		}
	})
	rt.GET("/v1/deliveries", func(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
		q := r.URL.Query()
		f := DeliveryFilter{Rejected: q.Get("rejected") == "true", Refused: q.Get("refused") == "true", Code: q.Get("code"), TriggerRef: q.Get("trigger_ref"),
			Before: q.Get("before")}
		f.Limit, _ = strconv.Atoi(q.Get("limit"))
		if s := q.Get("since"); s != "" {
			t, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				fail(w, badRequest("since %q: %v", s, err))
				return
			}
			f.Since = t
		}
		reply(w)(api.Deliveries(r.Context(), f))
	})
	rt.GET("/v1/deliveries/:id", func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
		reply(w)(api.Delivery(r.Context(), ps.ByName("id")))
	})
	rt.POST("/v1/deliveries/replay", func(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
		var req DeliveryReplayRequest
		if decode(w, r, &req) {
			reply(w)(api.ReplayDelivery(r.Context(), req))
		}
	})
	rt.GET("/v1/effects", func(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
		q := r.URL.Query()
		limit, _ := strconv.Atoi(q.Get("limit"))
		reply(w)(api.Effects(r.Context(), EffectFilter{State: q.Get("state"), Scope: q.Get("scope"), Limit: limit}))
	})
	rt.POST("/v1/effects/resolve", func(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
		var req ResolveRequest
		if decode(w, r, &req) {
			reply(w)(api.Resolve(r.Context(), req))
		}
	})
	rt.POST("/v1/effects/compensate", func(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
		var req CompensateRequest
		if decode(w, r, &req) {
			reply(w)(api.Compensate(r.Context(), req))
		}
	})
	rt.GET("/v1/health", func(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
		reply(w)(api.Health(r.Context()))
	})
	triggerRoutes(rt, api)
	storageRoutes(rt, api)
	resumeRoutes(rt, api)
	rt.NotFound = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fail(w, notFound("no admin route %s %s", r.Method, r.URL.Path))
	})
	return rt
}

// reply writes v as JSON, or err.
func reply(w http.ResponseWriter) func(v any, err error) {
	return func(v any, err error) {
		if err != nil {
			fail(w, err)
			return
		}
		httpjson.Write(w, http.StatusOK, v)
	}
}

// decode reads a strict JSON body into v, answering 400 when it cannot.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(io.LimitReader(r.Body, 16<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		fail(w, badRequest("request body: %v", err))
		return false
	}
	return true
}

func fail(w http.ResponseWriter, err error) {
	code := touba.ErrorCode(err)
	httpjson.Error(w, touba.HTTPStatus(code), code, errText(err), "")
}

// Server is the admin API on its unix socket.
type Server struct {
	Path string
	ln   net.Listener
	srv  *http.Server
}

// Listen binds the admin socket at path with mode 0600, to serve api; it binds a
// temporary name under umask 0177 (so it is created 0600), then renames it
// into place, so the socket is never reachable with a wider mode. Every
// request's peer must be root or the daemon's user (SO_PEERCRED), else it
// is refused with 403 AdminForbidden. A socket file left by a dead
// process is replaced; a live one (something answers) is refused.
// Every request carries its peer (uid and pid) as the operator for the
// audit trail.
func Listen(path string, api API) (*Server, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("admin socket %s: exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("admin socket %s: another process is serving it", path)
		}
	}
	tmp := filepath.Join(filepath.Dir(path), fmt.Sprintf(".admin-%d.sock", os.Getpid()))
	os.Remove(tmp)
	ln, err := listenPrivate(tmp)
	if err != nil {
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, 0o600); err != nil {
		ln.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		ln.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	srv := &http.Server{
		Handler:           onlyOwner(Handler(api)),
		ReadHeaderTimeout: 10 * time.Second,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			p := peerOf(c)
			return context.WithValue(WithOperator(ctx, p.describe), peerKey{}, p)
		},
	}
	return &Server{Path: path, ln: ln, srv: srv}, nil
}

type peerKey struct{}

// onlyOwner refuses every request whose peer is neither root nor the
// daemon's user (SO_PEERCRED), with 403 AdminForbidden.
func onlyOwner(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p, _ := r.Context().Value(peerKey{}).(peer); !p.allowed() {
			fail(w, touba.Errorf(touba.EAdminForbidden, "the admin socket serves root and the daemon's own user only; peer is %s", p.describe))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Serve answers on the socket until Close.
func (s *Server) Serve() error {
	err := s.srv.Serve(s.ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close waits for requests in flight (up to ctx) and removes the socket.
func (s *Server) Close(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	os.Remove(s.Path)
	return err
}

// queryOf renders non-empty values as a query string.
func queryOf(kv ...string) string {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" && kv[i+1] != "0" && kv[i+1] != "false" {
			v.Set(kv[i], kv[i+1])
		}
	}
	if len(v) == 0 {
		return ""
	}
	return "?" + v.Encode()
}
