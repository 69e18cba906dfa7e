package framework

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// FiguresEnv names the file Figure appends to (`make test` sets it and prints the file at
// the end, so the figures are seen without -v).
const FiguresEnv = "FLOTILLA_FIGURES"

var figuresMu sync.Mutex

// Figure logs a measured figure ("FIGURE: ...") and, when $FLOTILLA_FIGURES is set, appends
// it to that file as "<test>: <figure>".
func Figure(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	t.Logf("FIGURE: %s", msg)
	path := os.Getenv(FiguresEnv)
	if path == "" {
		return
	}
	figuresMu.Lock()
	defer figuresMu.Unlock()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Logf("record the figure in %s: %v", path, err)
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s: %s\n", t.Name(), msg)
}
