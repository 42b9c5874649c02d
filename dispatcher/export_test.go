package dispatcher

// PausedNow exposes pausedNow: what a run between two steps sees.
func (d *Dispatcher) PausedNow(ref string) bool { return d.pausedNow(ref) }
