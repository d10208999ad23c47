//go:build unix

package main

import (
	"fmt"
	"os"
	"syscall"
)

// lock takes an exclusive lock on file, waiting for another holder, and returns
// its release. The lock goes with the process, however it ends.
func lock(file string) (func(), error) {
	f, err := os.OpenFile(file, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		fmt.Printf("waiting for another modcheck run (lock %s)\n", file)
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			f.Close()
			return nil, err
		}
	}
	return func() { f.Close() }, nil
}
