//go:build !race

package server_test

// raceEnabled: the race detector runs (skipUnderRace).
const raceEnabled = false
