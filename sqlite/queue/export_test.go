package queue

import (
	"context"

	"github.com/touba/touba-trigger/internal/sqlitex"
)

// SubmitOp runs op through the writer like a state change, for tests.
func (q *Queue) SubmitOp(op func(context.Context, *sqlitex.Tx) (int64, error)) error {
	return q.change(op)
}

// WriterPending is how many operations wait for (or are in) the writer.
func (q *Queue) WriterPending() int64 { return q.w.Stats().Pending }

// The statements the no-IN-lists test compiles (migrate_inlists_test.go).
const (
	QInsert      = qInsert
	ActiveOfKey  = activeOfKey
	ReleaseNext  = releaseNext
	Rehold       = rehold
	FinishedList = finishedList
)
