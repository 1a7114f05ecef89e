//go:build race

package rustcore

const raceEnabled = true
