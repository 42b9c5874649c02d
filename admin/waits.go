package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	touba "github.com/touba/touba-trigger"
)

// Durable steps as operators see them (SPEC §2.3): an entry's sleeps and
// waits for events, what each awaits, and the waits a delivery matched.
// What a wait awaits (the trigger and the pointer `on`) is not in the
// wait's row, which holds only its key and value: it is read from the
// trigger definition the entry was accepted under (WaitStore.Program).

// WaitDetail is one wait of an entry, with what it awaits.
type WaitDetail struct {
	touba.Wait
	// AwaitsTrigger and AwaitsOn name what an event wait waits for: a
	// delivery of AwaitsTrigger with Value at the pointer AwaitsOn; empty
	// when the entry's definition is not stored.
	AwaitsTrigger string `json:"awaits_trigger,omitempty"`
	AwaitsOn      string `json:"awaits_on,omitempty"`
	// TimeoutMS and OnTimeout are the wait_for's timeout settings.
	TimeoutMS int64  `json:"timeout_ms,omitempty"`
	OnTimeout string `json:"on_timeout,omitempty"`
}

// Awaits says in words what the wait waits for (or waited for).
func (w WaitDetail) Awaits() string {
	if w.Kind == touba.WaitSleep {
		if w.WakeAt == nil {
			return "a sleep"
		}
		return "a sleep until " + touba.FormatTime(*w.WakeAt)
	}
	s := "a delivery"
	if w.AwaitsTrigger != "" {
		s += " of " + w.AwaitsTrigger
	}
	if w.Value != "" {
		s += " with " + w.Value
		if w.AwaitsOn != "" {
			s += " at " + w.AwaitsOn
		}
	}
	return s
}

// Timeout says when an event wait times out, and what it does then; ""
// for a sleep.
func (w WaitDetail) Timeout() string {
	if w.Kind == touba.WaitSleep {
		return ""
	}
	if w.WakeAt == nil {
		return "none"
	}
	s := touba.FormatTime(*w.WakeAt)
	if w.OnTimeout != "" {
		s += " (then " + w.OnTimeout + ")"
	}
	return s
}

// defStep is a step of a trigger definition (the program file's shape),
// as far as operators need it.
type defStep struct {
	ID      string          `json:"id"`
	Tool    string          `json:"tool,omitempty"`
	Sleep   json.RawMessage `json:"sleep,omitempty"`
	WaitFor *struct {
		Trigger   string `json:"trigger"`
		On        string `json:"on"`
		TimeoutMS int64  `json:"timeout_ms"`
		OnTimeout string `json:"on_timeout"`
	} `json:"wait_for,omitempty"`
}

// definitionSteps reads the steps of a trigger definition.
func definitionSteps(def []byte) ([]defStep, error) {
	var t struct {
		Steps []defStep `json:"steps"`
	}
	if err := json.Unmarshal(def, &t); err != nil {
		return nil, fmt.Errorf("trigger definition: %w", err)
	}
	return t.Steps, nil
}

// waitStore is the queue store's WaitStore, or nil while a store lacks it.
func (s *Service) waitStore() touba.WaitStore {
	ws, _ := s.Queue.(touba.WaitStore)
	return ws
}

// pinnedSteps are the steps of the definition d was accepted under; nil
// when it is not stored (an entry from before version pinning).
func (s *Service) pinnedSteps(ctx context.Context, d *touba.Delivery) ([]defStep, error) {
	ws := s.waitStore()
	if ws == nil || d.ProgramDigest == "" {
		return nil, nil
	}
	def, err := ws.Program(ctx, d.ProgramDigest)
	if err != nil || len(def) == 0 {
		return nil, err
	}
	return definitionSteps(def)
}

// waits fills det's waits: the entry's own, with what each awaits, and
// those of other entries its delivery matched.
func (s *Service) waits(ctx context.Context, d *touba.Delivery, det *EntryDetail) error {
	ws := s.waitStore()
	if ws == nil {
		return nil
	}
	list, err := ws.Waits(ctx, d.QueueID)
	if err != nil {
		return err
	}
	var steps []defStep
	for _, w := range list {
		if w.QueueID != d.QueueID {
			if w.MatchedQueueID == d.QueueID {
				det.MatchedWaits = append(det.MatchedWaits, w)
			}
			continue
		}
		wd := WaitDetail{Wait: w}
		if w.Kind == touba.WaitEvent {
			if steps == nil {
				if steps, err = s.pinnedSteps(ctx, d); err != nil {
					// What it awaits is a nicety; its key and value
					// still say it.
					s.Log.Warn().Err(err).Str("queue_id", d.QueueID).Msg("cannot read the entry's trigger definition")
					steps = []defStep{}
				}
			}
			for _, st := range steps {
				if st.ID == w.StepID && st.WaitFor != nil {
					wd.AwaitsTrigger, wd.AwaitsOn = st.WaitFor.Trigger, st.WaitFor.On
					wd.TimeoutMS, wd.OnTimeout = st.WaitFor.TimeoutMS, st.WaitFor.OnTimeout
					if wd.OnTimeout == "" && wd.TimeoutMS > 0 {
						wd.OnTimeout = "fail"
					}
				}
			}
		}
		det.Waits = append(det.Waits, wd)
	}
	return nil
}

// openWait is the entry's open wait, if any.
func openWait(det *EntryDetail) *WaitDetail {
	for i := range det.Waits {
		if !det.Waits[i].Ended() {
			return &det.Waits[i]
		}
	}
	return nil
}

// waitingHint says what a waiting entry waits for.
func waitingHint(det *EntryDetail) string {
	w := openWait(det)
	if w == nil {
		if det.WakeAt != nil {
			return "waiting until " + touba.FormatTime(*det.WakeAt)
		}
		return "waiting in a durable step"
	}
	s := "waiting in step " + w.StepID + " for " + w.Awaits()
	if t := w.Timeout(); t != "" && t != "none" {
		s += "; it times out at " + t
	}
	return s + "; it holds no worker while it waits"
}

// ShortDigest is the first 12 hex digits of a digest, for tables and
// pages.
func ShortDigest(d string) string {
	d = strings.TrimPrefix(d, "sha256:")
	if len(d) > 12 {
		return d[:12]
	}
	return d
}
