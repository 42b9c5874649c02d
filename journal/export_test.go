package journal

// Exported for the external tests only.
var (
	ParseRecord = parseRecord
	BootID      = bootID
)

// ResultHoldsSecret exposes the result check to the fuzz test.
func (j *Journal) ResultHoldsSecret(raw []byte) bool { return j.resultHoldsSecret(raw) }

// NewForFuzz is a Journal with no file, enough for the pure checks.
func NewForFuzz(opts Options) *Journal { return &Journal{secrets: opts.Secrets} }
