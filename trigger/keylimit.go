package trigger

import (
	"strconv"

	touba "github.com/touba/touba-trigger"
)

// CheckKeys refuses d, about to be enqueued for t, when a key value it
// resolved (SetConcurrencyKey, SetGather, SetDurable) is over
// touba.MaxKeyBytes of JSON: KeyTooLong, naming the key by the program's
// field and pointer, its length and the limit. Intake calls it before the
// delivery goes to the queue, so an oversized key is refused alone and
// never joins a commit batch (issue 43). The values d offers to other
// triggers' waits and cancels are not its own keys: SetDurable leaves out
// those over the limit, which no wait or cancel key can hold.
func (t *Trigger) CheckKeys(d *touba.Delivery) error {
	if c := t.Concurrency; c != nil {
		if err := touba.CheckKeyValue("concurrency.key "+keyName(c.KeyRef, c.KeyCEL), d.ConcKey); err != nil {
			return err
		}
	}
	if g := d.Gather; g != nil && t.Gather != nil {
		if err := touba.CheckKeyValue(g.Kind+".key "+t.Gather.keyName(), g.Value); err != nil {
			return err
		}
	}
	for _, v := range d.CancelKeys {
		which := "cancel_on match"
		for i, c := range t.CancelOn {
			if c.key == v.Key {
				which = "cancel_on[" + strconv.Itoa(i) + "].match " + string(c.Match)
				break
			}
		}
		if err := touba.CheckKeyValue(which, v.Value); err != nil {
			return err
		}
	}
	// Whatever else the stores index, as they will check it.
	return d.CheckKeys()
}
