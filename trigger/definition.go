package trigger

// ParseDefinition reads a trigger's Definition as stored with an entry's
// program_digest (WaitStore.SaveProgram), for version pinning: the
// dispatcher compares the steps an entry completed under it with the
// current trigger's. It is checked as the loader checks a trigger, but
// for what a definition cannot hold alone: the triggers its wait_for
// steps and cancel_on entries name are not looked up (the program they
// were in may have changed since), so the result has no Listeners; and a
// definition holds no dispatch field, so its Weight is DefaultWeight.
func ParseDefinition(definition []byte) (*Trigger, error) {
	w := newWalker("program definition")
	root := w.Decode(definition)
	if root == nil {
		return nil, w.Err()
	}
	t, err := w.trigger("$", root)
	if err != nil {
		return nil, w.Err()
	}
	return t, nil
}
