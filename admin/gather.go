package admin

import (
	"context"
	"strconv"
	"time"

	touba "github.com/touba/touba-trigger"
)

// Gatherings for operators (SPEC §2.1 debounce, batch): `queue show` of a
// carrier lists the deliveries its run gathers; a merged entry names its
// carrier; replaying a merged entry replays its carrier.

// GatheringDetail is a carrier's gathering: its state and times, and the
// deliveries merged into it, in the order its run sees them (after the
// carrier itself).
type GatheringDetail struct {
	touba.Gathering
	Merged []GatheredDelivery `json:"merged"`
}

// GatheredDelivery is one delivery merged into a carrier.
type GatheredDelivery struct {
	QueueID    string    `json:"queue_id"`
	EventID    string    `json:"event_id"`
	ReceivedAt time.Time `json:"received_at"`
	BodyBytes  int       `json:"body_bytes"`
}

func (s *Service) gatherStore() touba.GatherStore {
	gs, _ := s.Queue.(touba.GatherStore)
	return gs
}

// carries sets e.Gathers when e is a carrier waiting in its live
// gathering. Only a waiting entry with no wake of its own (a durable
// sleep's or a wait's timeout) can be one, so a listing asks the store
// for those only.
func (s *Service) carries(ctx context.Context, e *Entry) error {
	gs := s.gatherStore()
	if gs == nil || e.Status != touba.StatusWaiting || e.WakeAt != nil {
		return nil
	}
	g, err := gs.Gathering(ctx, e.QueueID)
	if err != nil || g == nil || !g.Live {
		return err
	}
	e.Gathers = &EntryGathering{Kind: g.Kind, WakeAt: g.WakeAt}
	return nil
}

// gathering fills det.Gathering for a carrier.
func (s *Service) gathering(ctx context.Context, d *touba.Delivery, det *EntryDetail) error {
	gs := s.gatherStore()
	if gs == nil || d.Status == touba.StatusMerged {
		return nil
	}
	g, err := gs.Gathering(ctx, d.QueueID)
	if err != nil || g == nil {
		return err
	}
	// One body at a time (issue 43): a gathering holds up to max_bytes.
	det.Gathering = &GatheringDetail{Gathering: *g, Merged: make([]GatheredDelivery, 0, max(g.Size-1, 0))}
	return gs.EachGathered(ctx, d.QueueID, func(m *touba.Delivery) error {
		det.Gathering.Merged = append(det.Gathering.Merged, GatheredDelivery{QueueID: m.QueueID, EventID: m.EventID,
			ReceivedAt: m.ReceivedAt, BodyBytes: len(m.Body)})
		return nil
	})
}

// withGathered reads what entry's run sees of its gathering (the
// deliveries merged into it), to rebuild a step's input as the run built
// it.
func (s *Service) withGathered(ctx context.Context, entry *touba.Delivery) error {
	gs := s.gatherStore()
	if gs == nil {
		return nil
	}
	list, err := gs.Gathered(ctx, entry.QueueID)
	if err != nil {
		return err
	}
	entry.Gathered = list
	return nil
}

// carrierOf is the carrier of a merged entry id, "" for any other id: a
// replay of a merged entry replays its carrier.
func (s *Service) carrierOf(ctx context.Context, id string) (string, error) {
	d, err := s.Queue.Get(ctx, id)
	if err != nil || d == nil || d.Status != touba.StatusMerged {
		return "", err
	}
	return d.MergedInto, nil
}

// gatheringHint says what a waiting carrier or a merged entry waits for.
func gatheringHint(det *EntryDetail) string {
	switch g := det.Gathering; {
	case det.Status == touba.StatusMerged:
		return "merged into " + det.MergedInto + ", whose run handles this delivery with the others of its gathering; " +
			"see: touba-trigger queue show " + det.MergedInto
	case g != nil && g.Live:
		return "gathering " + g.Kind + " deliveries of key " + keyText(g.Value) + " (" + strconv.Itoa(g.Size) + " so far); " +
			"the run starts at " + touba.FormatTime(g.WakeAt) + " unless it fills first; it holds no worker while it gathers"
	}
	return ""
}

func keyText(v string) string {
	if v == "" {
		return "(none: one gathering for the trigger)"
	}
	return v
}
