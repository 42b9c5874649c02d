package admin

import (
	"context"
	"time"

	touba "github.com/touba/touba-trigger"
)

// Overview is the state of the daemon at a glance, for the console's
// first page (SPEC §6.1): entries by status, the oldest pending one, the
// effects awaiting an operator, recent rejections and held keys.
type Overview struct {
	At             time.Time        `json:"at"`
	Entries        map[string]int64 `json:"entries"` // by status
	OldestPending  *time.Time       `json:"oldest_pending,omitempty"`
	Effects        map[string]int64 `json:"effects,omitempty"` // by state; nil without a journal
	RejectedByCode map[string]int64 `json:"rejected_by_code"`  // the last hour; answered 400 and above
	// RejectedCapped: more than RejectedScan rejections in the hour; the
	// counts are of the newest ones only.
	RejectedCapped bool  `json:"rejected_capped,omitempty"`
	HeldKeys       int64 `json:"held_keys"` // -1 when the store cannot tell
	// Storage is the daemon's last measure of its storage (SPEC §8.1),
	// History its --history (0 keeps everything); nil when not measured.
	Storage *touba.StorageReport `json:"storage,omitempty"`
	History time.Duration        `json:"history,omitempty"`
}

// RejectedScan bounds how many of the last hour's rejections Overview
// reads: a flood of them must not make the page slow.
const RejectedScan = 5000

// Overview reads the counts the console's overview shows.
func (s *Service) Overview(ctx context.Context) (*Overview, error) {
	now := time.Now()
	o := &Overview{At: now, RejectedByCode: map[string]int64{}, HeldKeys: -1}
	var err error
	if o.Entries, err = s.Queue.CountByStatus(ctx); err != nil {
		return nil, err
	}
	if at, ok, err := s.Queue.OldestPending(ctx); err != nil {
		return nil, err
	} else if ok {
		o.OldestPending = &at
	}
	if s.Journal != nil {
		if o.Effects, err = s.Journal.CountByState(ctx); err != nil {
			return nil, err
		}
	}
	// Refused, not Rejected: a sender's redelivery of a consumed entry is
	// answered 200 and must not bury a real refusal (a 409, a 401).
	rows, err := s.State.Deliveries(ctx, touba.LogFilter{Refused: true, Since: now.Add(-time.Hour), Limit: RejectedScan + 1})
	if err != nil {
		return nil, err
	}
	o.RejectedCapped = len(rows) > RejectedScan
	for i, r := range rows {
		if i < RejectedScan {
			o.RejectedByCode[r.ErrorCode]++
		}
	}
	if s.HeldKeys != nil {
		if o.HeldKeys, err = s.HeldKeys(ctx); err != nil {
			return nil, err
		}
	}
	if s.StorageCache != nil {
		o.Storage, o.History = s.StorageCache(), s.HistoryWindow
	}
	return o, nil
}

// CanCompensate reports whether the running configuration's binding of
// toolRef declares compensation support; false when none is loaded.
func (s *Service) CanCompensate(toolRef string) bool {
	return s.Compensable != nil && s.Compensable(toolRef)
}
