package trigger

import (
	"net/http"

	"github.com/touba/touba-trigger/tracing"
)

// annotate adds intake's decision to the request's touba.intake span
// (tracing.Middleware starts it); a no-op when tracing is off.
func annotate(w http.ResponseWriter, req *request, code, queueID string) {
	tracing.AnnotateIntake(w, req.triggerRef, req.eventID, queueID, code)
}
