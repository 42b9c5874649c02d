// Package httpjson writes the JSON answers of every HTTP surface of the
// daemon (intake, admin socket), and their one error shape
// {"error": {"code", "message", "queue_id"}}.
package httpjson

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Write sends v as a JSON document with status.
func Write(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"code":"Internal","message":"encode answer"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// ErrorBody is the error answer of every surface.
type ErrorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		QueueID string `json:"queue_id,omitempty"`
	} `json:"error"`
}

// Error sends the error answer for code with status.
func Error(w http.ResponseWriter, status int, code, message, queueID string) {
	var b ErrorBody
	b.Error.Code, b.Error.Message, b.Error.QueueID = code, message, queueID
	Write(w, status, b)
}
