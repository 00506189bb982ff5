// Package testbuf holds Buffer, a bytes.Buffer safe for the goroutines of a
// test (a server or a child process writing its log while the test reads).
// It links only the standard library, so any package's tests may use it.
package testbuf

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer that many goroutines may write while a test
// reads it: a child's or a server's log that the test waits on.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
