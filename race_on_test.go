//go:build race

package informer_test

const raceEnabled = true
