package admin

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/julienschmidt/httprouter"

	touba "github.com/touba/touba-trigger"
)

// StorageReport is `touba-trigger storage` (SPEC §6, §8.1): the backend's
// sizes, its oldest entries and what --history forgets.
type StorageReport struct {
	touba.StorageReport
	// History is the window in force: the daemon's --history, or the
	// CLI's on the files; 0 keeps everything.
	History        time.Duration `json:"-"`
	HistorySeconds float64       `json:"history_seconds"`
	// LastPass is the daemon's last pass; nil on the CLI's own files or
	// before the first.
	LastPass *PassReport `json:"last_pass,omitempty"`
}

// PassReport is one pass of the daemon's --history loop.
type PassReport struct {
	touba.PruneReport
	At    time.Time `json:"at"`
	Took  float64   `json:"took_seconds"`
	Error string    `json:"error,omitempty"`
}

// StorageRequest asks for a storage report. History, when not zero, is
// the window to count what a pass would forget with, instead of the
// daemon's (a what-if); negative keeps everything.
type StorageRequest struct {
	History time.Duration `json:"history,omitempty"`
}

// Storage implements API: it measures the backend now.
func (s *Service) Storage(ctx context.Context, r StorageRequest) (*StorageReport, error) {
	if s.History == nil {
		return nil, touba.Errorf(touba.EBadRequest, "this backend reports no storage")
	}
	window := s.HistoryWindow
	if r.History != 0 {
		window = max(r.History, 0)
	}
	var before time.Time
	if window > 0 {
		before = time.Now().Add(-window)
	}
	rep, err := s.History.Storage(ctx, before)
	if err != nil {
		return nil, err
	}
	out := &StorageReport{StorageReport: *rep, History: window, HistorySeconds: window.Seconds()}
	if s.LastPass != nil {
		out.LastPass = s.LastPass()
	}
	return out, nil
}

// Storage implements API.
func (c *Client) Storage(ctx context.Context, r StorageRequest) (*StorageReport, error) {
	path := "/v1/storage"
	if r.History != 0 {
		path += "?history=" + strconv.FormatInt(int64(r.History), 10)
	}
	rep, err := get[*StorageReport](ctx, c, path)
	if err == nil && rep != nil {
		rep.History = time.Duration(rep.HistorySeconds * float64(time.Second))
	}
	return rep, err
}

func storageRoutes(rt *httprouter.Router, api API) {
	rt.GET("/v1/storage", func(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
		var req StorageRequest
		if h := r.URL.Query().Get("history"); h != "" {
			n, err := strconv.ParseInt(h, 10, 64)
			if err != nil {
				fail(w, badRequest("history %q: want nanoseconds", h))
				return
			}
			req.History = time.Duration(n)
		}
		reply(w)(api.Storage(r.Context(), req))
	})
}

// HumanBytes shows a size in binary units (1.5 GiB), as the CLI and the
// console print storage.
func HumanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}
