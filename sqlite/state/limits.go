package state

// rowOverhead approximates what SQLite spends on a row beyond its column
// bytes (record header, the seq and status integers, the three index
// entries). It makes a row's counted size closer to its cost on disk.
const rowOverhead = 160

// heldBytes approximates the memory a buffered row holds besides its body:
// its strings, its header map (with a per-entry cost) and the struct.
func heldBytes(d *Delivery) int64 {
	n := int64(len(d.DeliveryID)+len(d.TriggerRef)+len(d.EventID)+len(d.Digest)+len(d.ErrorCode)+
		len(d.QueueID)+len(d.RemoteAddr)) + 256
	for k, v := range d.Headers {
		n += int64(len(k)+len(v)) + 64
	}
	return n
}

// storedSize is what a row counts against LogMaxBytes: the bytes of every
// column as written (headers as their JSON text, the body if stored) plus
// rowOverhead. Migration 0004 computes the same for rows written before.
func storedSize(d *Delivery, at string, headersJSON []byte) int64 {
	n := int64(len(d.DeliveryID)+len(at)+len(d.TriggerRef)+len(d.EventID)+len(d.Digest)+len(d.ErrorCode)+
		len(d.QueueID)+len(d.RemoteAddr)+len(headersJSON)) + rowOverhead
	if d.BodyStored {
		n += int64(len(d.Body))
	}
	return n
}
