package journal

import "context"

// Exported for the external tests only.
var (
	ParseRecord = parseRecord
	BootID      = bootID
	ProcStart   = procStart
	ParseProc   = parseProcStart
)

// ResultHoldsSecret exposes the result check to the fuzz test.
func (j *Journal) ResultHoldsSecret(raw []byte) bool { return j.resultHoldsSecret(raw) }

// NewForFuzz is a Journal with no file, enough for the pure checks.
func NewForFuzz(opts Options) *Journal { return &Journal{secrets: opts.Secrets} }

// DropClaim releases a call's in-memory claim without writing, as an
// Abandon whose own write failed leaves things.
func (j *Journal) DropClaim(scope, effectID, callID string) { j.release(scope, effectID, callID) }

// The statements the no-IN-lists test compiles (migrate_inlists_test.go).
const (
	QInsertEffect = qInsertEffect
	QFinish       = qFinish
)

// WriterTempBTrees is sqlitex.TempBTrees on the journal's writer
// connection, the one that ran the migrations.
func (j *Journal) WriterTempBTrees(ctx context.Context, query string) (int, error) {
	var n int
	err := j.submit(ctx, func(ctx context.Context, tx *wtx) error {
		var err error
		n, err = tx.TempBTrees(query)
		return err
	})
	return n, err
}
