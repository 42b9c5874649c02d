package trigger

import (
	"io"
	"net/http"
	"time"

	touba "github.com/touba/touba-trigger"
)

// Lingering close (SPEC §3.1): a sender that writes its whole body before
// reading would see a connection reset if the daemon answered 413 and
// closed with the body still arriving (the kernel resets a socket closed
// with unread data, and the answer is lost with it). So after a 413 the
// rest of the body is read and thrown away, as nginx does, within bounds:
// at most lingerBytes and lingerTime per request, and at most maxLingering
// requests at once (past that the connection is closed at once, as
// before). A sender that sends more than that is cut off.
const (
	lingerTime   = 5 * time.Second
	lingerBytes  = 16 << 20
	maxLingering = 256
)

// tooLarge answers 413 TriggerPayloadTooLarge so the sender can read it:
// the answer is sent and flushed, then the rest of the body is discarded
// within the bounds above, then the connection is closed.
func (in *Intake) tooLarge(w http.ResponseWriter, r *http.Request, req *request, msg string) {
	rc := http.NewResponseController(w)
	// Without full duplex the server tries to read the unread body itself
	// when the answer is written, and gives up (closing) past 256 KiB.
	// The error only means the writer cannot (a test recorder).
	_ = rc.EnableFullDuplex()
	w.Header().Set("Connection", "close")
	in.reject(w, r, req, touba.ETriggerPayloadTooLarge, msg, "")
	if rc.Flush() != nil {
		return
	}
	in.linger(rc, r)
}

func (in *Intake) linger(rc *http.ResponseController, r *http.Request) {
	if in.lingering.Add(1) > maxLingering {
		in.lingering.Add(-1)
		return
	}
	defer in.lingering.Add(-1)
	if rc.SetReadDeadline(time.Now().Add(lingerTime)) != nil {
		return
	}
	// io.Discard reads through a small pooled buffer: lingering holds no
	// body in memory.
	io.CopyN(io.Discard, r.Body, lingerBytes)
}
