package framework

import "sync"

// Warnings is a client-go warning handler (rest.Config.WarningHandler) that keeps the warnings
// the API answers with, for tests that assert them.
type Warnings struct {
	mu    sync.Mutex
	texts []string
}

// HandleWarningHeader keeps text.
func (w *Warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.texts = append(w.texts, text)
}

// Take returns the warnings kept since the last Take and forgets them.
func (w *Warnings) Take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	t := w.texts
	w.texts = nil
	return t
}
