//go:build !race

package rustcore

const raceEnabled = false
