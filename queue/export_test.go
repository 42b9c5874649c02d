package queue

import (
	"context"
	"database/sql"
)

// SubmitOp runs op through the writer like a state change, for tests.
func (q *Queue) SubmitOp(op func(context.Context, *sql.Tx) (int64, error)) error {
	return q.submit(&enqueueReq{ch: make(chan struct{}), op: op})
}
