package journal

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
