package handler

import (
	"unicode/utf8"

	touba "github.com/touba/touba-trigger"
)

// What a handler answers is stored as text: the output as a step's result
// (effects.result, run_steps.output: TEXT columns on both backends, not
// jsonb), the receipt ref, the error's code and message. PostgreSQL refuses
// invalid UTF-8 and NUL in text where SQLite keeps them, so an answer
// taken as it came would be stored on one backend and not the other: on
// PostgreSQL an applied write's Finish failed (SQLSTATE 22021), the effect
// stayed dispatched and its entry parked EffectOutcomeUnknown, and a step
// without effects was called again every second because its checkpoint
// could not be saved. So the answer is made storable here, where it is
// read, the same for every runner and backend:
//
//   - output: each byte that is not part of valid UTF-8 becomes \ufffd,
//     as encoding/json writes such a byte when it marshals a string. JSON's
//     structure is ASCII, so such bytes are only ever inside strings and
//     the document stays valid. An escaped \u0000 stays as written: in a
//     TEXT column it is six ASCII characters;
//   - receipt ref, error code and message (decoded strings, where
//     encoding/json already turned invalid bytes into U+FFFD and \u0000
//     into NUL): NUL becomes U+FFFD (touba.Clean).
//
// The write itself is not in doubt when only its text is broken: refusing
// the answer (HandlerProtocolError, outcome unknown) would park an applied
// write, which is worse than repairing a character.

// cleanAnswer makes res's handler-given text storable, in place.
func cleanAnswer(res *Result) *Result {
	res.Output = cleanJSON(res.Output)
	res.ReceiptRef = touba.Clean(res.ReceiptRef)
	if res.Err != nil {
		res.Err.Code = touba.Clean(res.Err.Code)
		res.Err.Message = touba.Clean(res.Err.Message)
	}
	return res
}

// cleanJSON returns doc, a valid JSON document, with each byte that is not
// part of valid UTF-8 written as \ufffd; doc itself when it is valid.
func cleanJSON(doc []byte) []byte {
	if utf8.Valid(doc) {
		return doc
	}
	out := make([]byte, 0, len(doc)+32)
	for i := 0; i < len(doc); {
		r, n := utf8.DecodeRune(doc[i:])
		if r == utf8.RuneError && n == 1 {
			out = append(out, `\ufffd`...)
		} else {
			out = append(out, doc[i:i+n]...)
		}
		i += n
	}
	return out
}
