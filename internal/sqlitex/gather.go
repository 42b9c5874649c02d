package sqlitex

// Gather appends first and then every value already waiting on ch to
// batch[:0], max in all: the batch of one group commit. It never waits, so
// the requests that arrive while a batch commits form the next one (no
// linger timer: the fsync is the linger). It stops early when ch closes.
func Gather[T any](batch []T, first T, ch <-chan T, max int) []T {
	batch = append(batch[:0], first)
	for len(batch) < max {
		select {
		case v, ok := <-ch:
			if !ok {
				return batch
			}
			batch = append(batch, v)
		default:
			return batch
		}
	}
	return batch
}
