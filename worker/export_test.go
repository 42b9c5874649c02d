package worker

import "time"

// SetGatherFor sets how long h's takes wait for runs leased for their room.
func SetGatherFor(h *Hub, d time.Duration) { h.gatherFor = d }
