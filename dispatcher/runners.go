package dispatcher

// A run is handed to a goroutine that ran an earlier one when one is idle,
// and to a new goroutine otherwise. A new goroutine starts on a small stack
// and grows it (a copy each time) as the run goes deeper: on PostgreSQL
// with 256 workers that growth was 4% of the daemon's CPU, and starting
// the goroutine 2% (issue 42, pprof of a drain). The leaser's slots bound
// the runs going at once; a runner is made only while there are fewer
// than --workers (one that has just released its slot may not be waiting
// yet, and waiting for it costs less than another goroutine), and an idle
// runner ends when leasing stops. An idle daemon so keeps up to --workers
// parked goroutines, a few KiB each (the collector shrinks their stacks).

// job is a leased entry's run, its slot's release included.
type job func()

// hand runs j on an idle runner, or on a new one when none is waiting.
// Only the leaser calls it, so the count it reads is not raced by another
// hand.
func (d *Dispatcher) hand(j job) {
	select {
	case d.jobs <- j:
		return
	default:
	}
	if int(d.runners.Load()) >= d.opts.Workers {
		// Every runner but those running the other slots' jobs is
		// about to wait; they all end on a stop, so a stop makes one.
		select {
		case d.jobs <- j:
			return
		case <-d.stop:
		}
	}
	d.runners.Add(1)
	d.wg.Add(1)
	go d.runner(j)
}

// runner runs j, then every job handed to it while it waits, until
// leasing stops.
func (d *Dispatcher) runner(j job) {
	defer d.wg.Done()
	defer d.runners.Add(-1)
	for {
		j()
		select {
		case j = <-d.jobs:
		case <-d.stop:
			return
		}
	}
}
