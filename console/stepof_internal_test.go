package console

import "testing"

// TestStepOfFollowsGenerations: the effect page names the step of an
// effect made after a resume with new effects ("<queue_id>:<step>#<n>")
// by the step's id, as queue show's step outputs do, so the step's own
// output is not listed among those before it.
func TestStepOfFollowsGenerations(t *testing.T) {
	for id, want := range map[string]string{
		"q1:ship":   "ship",
		"q1:ship#2": "ship",
	} {
		if got := stepOf("q1", id); got != want {
			t.Errorf("stepOf(q1, %s) = %q, want %q", id, got, want)
		}
	}
}
