package verify

// The header parsers and formatters, exposed to the external tests (fuzz
// and table tests) without widening the package's API.
var (
	ParseHex       = parseHex
	FormatHex      = formatHex
	ParseBase64    = parseBase64
	FormatBase64   = formatBase64
	ParseStandard  = parseStandard
	FormatStandard = formatStandard
	ParseUnix      = parseUnix
)

// ParseStripe exposes parseStripe with its result spread out.
func ParseStripe(s string) (ts string, unix int64, v1 [][]byte, err error) {
	sig, err := parseStripe(s)
	return sig.ts, sig.unix, sig.v1, err
}

// FormatStripe exposes formatStripe.
func FormatStripe(ts string, v1 [][]byte) string {
	return formatStripe(stripeSig{ts: ts, v1: v1})
}
