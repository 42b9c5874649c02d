package admin

import (
	"cmp"
	"context"
	"slices"
	"strings"

	touba "github.com/touba/touba-trigger"
)

// Trying a trigger on real traffic (SPEC §2.4, `triggers test REF
// [--program FILE] [--last N]`): the trigger of the running program, or of
// a candidate program, against the last N deliveries its source accepted
// (its accepting trigger's entries for a route, its own otherwise),
// filtered deliveries kept in the delivery log included. Nothing is
// enqueued and no tool is called.

// DefaultTestLast is how many deliveries a test reads by default, and
// MaxTestLast the most it reads.
const (
	DefaultTestLast = 20
	MaxTestLast     = 1000
)

// TriggerTestRequest names the trigger to try, on how many deliveries,
// and the candidate program to try it from (its text and its path, for
// messages), or none for the running program.
type TriggerTestRequest struct {
	TriggerRef  string `json:"trigger_ref"`
	Last        int    `json:"last,omitempty"`
	Program     []byte `json:"program,omitempty"`
	ProgramPath string `json:"program_path,omitempty"`
}

// TriggerTest is what a test found.
type TriggerTest struct {
	TriggerRef string `json:"trigger_ref"`
	// Source is the trigger whose deliveries were read; RouteOf is set
	// when TriggerRef is a route of it.
	Source  string `json:"source"`
	RouteOf string `json:"route_of,omitempty"`
	// Program is "running", or the candidate's path.
	Program    string                `json:"program"`
	Deliveries []touba.TriedDelivery `json:"deliveries"`
	// Taken counts the deliveries the trigger's filter takes; Skipped
	// those whose body --retention (or the delivery log's bounds) emptied.
	Taken   int `json:"taken"`
	Skipped int `json:"skipped"`
}

// Tester tries the triggers of one program (the daemon builds it from
// the running program or a candidate: server).
type Tester interface {
	// Source is the trigger whose deliveries ref takes (itself, or its
	// accepting trigger), and whether ref is a route; NotFound when the
	// program has no trigger ref.
	Source(ref string) (source string, route bool, err error)
	// Try is what ref would do with a stored delivery of its source.
	Try(ref string, d *touba.Delivery) touba.TriedDelivery
}

// TestTrigger tries a trigger on its source's last deliveries.
func (s *Service) TestTrigger(ctx context.Context, r TriggerTestRequest) (*TriggerTest, error) {
	ref := TriggerRef(strings.TrimSpace(r.TriggerRef))
	if ref == "" {
		return nil, badRequest("a trigger ref is required")
	}
	last := cmp.Or(r.Last, DefaultTestLast)
	if last < 1 || last > MaxTestLast {
		return nil, badRequest("--last must be between 1 and %d (got %d)", MaxTestLast, r.Last)
	}
	if s.Tester == nil {
		return nil, touba.Errorf(touba.EBadRequest, "no program is loaded to try %s with: give --program FILE", ref)
	}
	tester, err := s.Tester(r.Program, r.ProgramPath)
	if err != nil {
		return nil, err
	}
	source, route, err := tester.Source(ref)
	if err != nil {
		return nil, err
	}
	out := &TriggerTest{TriggerRef: ref, Source: source, Program: cmp.Or(r.ProgramPath, "running"), Deliveries: []touba.TriedDelivery{}}
	if route {
		out.RouteOf = source
	}
	stored, err := s.lastDeliveries(ctx, source, last)
	if err != nil {
		return nil, err
	}
	for _, st := range stored {
		if st.d.Body == nil {
			out.Skipped++
			continue
		}
		tried := tester.Try(ref, st.d)
		tried.QueueID, tried.DeliveryID, tried.EventID, tried.ReceivedAt = st.d.QueueID, st.deliveryID, st.d.EventID, st.d.ReceivedAt
		if tried.Taken {
			out.Taken++
		}
		out.Deliveries = append(out.Deliveries, tried)
	}
	return out, nil
}

// storedDelivery is one delivery a test reads: an entry, or a row of the
// delivery log (deliveryID set; its QueueID empty).
type storedDelivery struct {
	d          *touba.Delivery
	deliveryID string
}

// lastDeliveries are the last n deliveries source accepted, newest first:
// its entries, and the deliveries its filter left out (202 filtered, or
// ExpressionFailed) that the delivery log kept. A body retention emptied
// is nil.
func (s *Service) lastDeliveries(ctx context.Context, source string, n int) ([]storedDelivery, error) {
	entries, err := s.Queue.List(ctx, touba.EntryFilter{TriggerRef: source, Newest: true, Limit: n})
	if err != nil {
		return nil, err
	}
	var out []storedDelivery
	for _, e := range entries {
		out = append(out, storedDelivery{d: e})
	}
	for _, code := range []string{touba.IntakeFiltered, touba.EExpressionFailed} {
		rows, err := s.State.Deliveries(ctx, touba.LogFilter{TriggerRef: source, Code: code, Limit: n})
		if err != nil {
			return nil, err
		}
		for _, row := range rows {
			if row.StatusCode >= 300 {
				continue // a key that failed (422): refused, not filtered
			}
			d := &touba.Delivery{TriggerRef: row.TriggerRef, EventID: row.EventID, Digest: row.Digest, Headers: row.Headers,
				ReceivedAt: row.At, RemoteAddr: row.RemoteAddr}
			if row.BodyStored {
				d.Body = row.Body
				if d.Body == nil {
					d.Body = []byte{}
				}
			}
			out = append(out, storedDelivery{d: d, deliveryID: row.DeliveryID})
		}
	}
	slices.SortStableFunc(out, func(a, b storedDelivery) int { return b.d.ReceivedAt.Compare(a.d.ReceivedAt) })
	if len(out) > n {
		out = out[:n]
	}
	return out, nil
}
