package trigger

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/julienschmidt/httprouter"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/httpjson"
)

// Router returns the daemon's HTTP handler: POST /triggers/<name>,
// GET /healthz and GET /readyz. ready reports what /readyz checks beyond
// draining (files open, lock held, disk writable).
func (in *Intake) Router(ready func(context.Context) error) http.Handler {
	rt := httprouter.New()
	// A redirect of a POST would make senders re-send elsewhere; answer
	// the path as given instead.
	rt.RedirectTrailingSlash = false
	rt.RedirectFixedPath = false
	rt.HandleMethodNotAllowed = true
	rt.HandleOPTIONS = false

	rt.POST("/triggers/*name", func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
		in.Serve(w, r, strings.TrimPrefix(ps.ByName("name"), "/"))
	})
	rt.GET("/healthz", func(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
		httpjson.Write(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	rt.GET("/readyz", func(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
		if in.Draining() {
			writeError(w, touba.ETriggerUnavailable, "draining", "")
			return
		}
		if ready != nil {
			ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
			defer cancel()
			if err := ready(ctx); err != nil {
				writeError(w, touba.ETriggerUnavailable, err.Error(), "")
				return
			}
		}
		httpjson.Write(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	rt.MethodNotAllowed = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req := &request{at: in.now()}
		if name, ok := strings.CutPrefix(r.URL.Path, "/triggers/"); ok {
			req.triggerRef = "trigger:" + name
			in.reject(w, r, req, touba.EMethodNotAllowed, "method "+r.Method+" not allowed", "")
			return
		}
		writeError(w, touba.EMethodNotAllowed, "method "+r.Method+" not allowed", "")
	})
	rt.NotFound = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if name, ok := strings.CutPrefix(r.URL.Path, "/triggers/"); ok || r.URL.Path == "/triggers" {
			req := &request{at: in.now(), triggerRef: "trigger:" + name}
			in.reject(w, r, req, touba.ETriggerNotFound, "no such trigger", "")
			return
		}
		writeError(w, "NotFound", "no route "+r.URL.Path, "")
	})
	return rt
}
