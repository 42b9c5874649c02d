package handler

import (
	"encoding/json"
	"strings"
	"unicode"
)

// rejectionPeek bounds what is read of a 4xx answer's body for its reason.
const rejectionPeek = 4 << 10

// receiverError is the reason a refusal's body gives, as ": CODE: message"
// ("" when it gives none an operator could use): the protocol's error
// ({"ok": false, "error": {"code", "message"}}, what the SDKs answer, 401
// SignatureInvalid included), and the common {"error": {"code"|"type",
// "message"}} and {"error": "..."} shapes of HTTP APIs. The code must look
// like one (letters, digits, _ . -, at most 64) and the message is cut to
// one line of 200 characters: a receiver's answer is not ours to store
// whole.
func receiverError(body []byte) string {
	var doc struct {
		Error json.RawMessage `json:"error"`
	}
	if len(body) == 0 || json.Unmarshal(body, &doc) != nil || len(doc.Error) == 0 {
		return ""
	}
	var e struct {
		Code    json.RawMessage `json:"code"`
		Type    string          `json:"type"`
		Message string          `json:"message"`
	}
	var code, msg string
	if json.Unmarshal(doc.Error, &msg) != nil {
		if json.Unmarshal(doc.Error, &e) != nil {
			return ""
		}
		// A code is a string or a number, written as it came.
		if json.Unmarshal(e.Code, &code) != nil {
			code = string(e.Code)
		}
		if code == "" {
			code = e.Type
		}
		msg = e.Message
	}
	if !isCode(code) {
		code = ""
	}
	msg = oneLine(msg, 200)
	switch {
	case code != "" && msg != "":
		return ": " + code + ": " + msg
	case code != "":
		return ": " + code
	case msg != "":
		return ": " + msg
	}
	return ""
}

func isCode(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r == '.' || r == '-' || r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r))) {
			return false
		}
	}
	return true
}

// oneLine is s on one line of at most n runes, control characters dropped.
func oneLine(s string, n int) string {
	var b strings.Builder
	for _, r := range strings.TrimSpace(s) {
		if n == 0 {
			b.WriteString("…")
			break
		}
		if unicode.IsControl(r) {
			r = ' '
		}
		b.WriteRune(r)
		n--
	}
	return b.String()
}
