package api

import (
	"bytes"
	"errors"
	"os/exec"
	"regexp"
	"sync"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func asExit(err error, target **exec.ExitError) bool { return errors.As(err, target) }

func regexpMatch(pattern, s string) bool { return regexp.MustCompile(pattern).MatchString(s) }
