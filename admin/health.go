package admin

import (
	"context"
	"time"

	touba "github.com/touba/touba-trigger"
)

// Health is the daemon's readiness with its details, for operators only:
// the public /readyz says ready or not_ready and nothing more (file paths
// and free bytes are none of a sender's business).
type Health struct {
	Ready     bool         `json:"ready"`
	Reason    string       `json:"reason,omitempty"` // why not ready
	CheckedAt time.Time    `json:"checked_at"`
	Files     []FileHealth `json:"files"`
}

// FileHealth is one of the daemon's files and the free space of its disk.
type FileHealth struct {
	Role      string `json:"role"` // queue, state, journal
	Path      string `json:"path"`
	FreeBytes uint64 `json:"free_bytes"`
}

// Health implements API: the daemon's last readiness check.
func (s *Service) Health(ctx context.Context) (*Health, error) {
	if s.Probe == nil {
		return nil, touba.Errorf(touba.EBadRequest, "no daemon runs on these files: health is the daemon's")
	}
	h := s.Probe()
	if h == nil {
		return nil, touba.Errorf(touba.ETriggerUnavailable, "the daemon has not checked its health yet")
	}
	return h, nil
}

// Health implements API.
func (c *Client) Health(ctx context.Context) (*Health, error) {
	return get[*Health](ctx, c, "/v1/health")
}
