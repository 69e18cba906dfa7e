package runtime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/defaults"
	"github.com/containerd/containerd/v2/pkg/cio"
)

// Exec runs cmd in a running container and returns its exit code. stdin may be nil; with tty the
// process gets a terminal and its output all arrives on stdout. When ctx ends the process is
// killed.
func (r *Runtime) Exec(ctx context.Context, id string, cmd []string, stdin io.Reader, stdout, stderr io.Writer, tty bool) (int, error) {
	ctx = r.ns(ctx)
	if len(cmd) == 0 {
		return -1, errors.New("exec: empty command")
	}
	// An RPC cut short by ctx reports "Unknown: context deadline exceeded": say what happened.
	// containerd's side of the call ends at the deadline too, and its answer can arrive
	// before the timer that sets ctx.Err has run (on a loaded machine): a deadline passed is
	// the deadline exceeded.
	ctxErr := func(err error) error {
		cerr := ctx.Err()
		if d, ok := ctx.Deadline(); cerr == nil && ok && !time.Now().Before(d) {
			cerr = context.DeadlineExceeded
		}
		if cerr != nil {
			return fmt.Errorf("exec in container %s: %w", id, cerr)
		}
		return err
	}
	cont, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return -1, ctxErr(notFound("exec in container "+id, err))
	}
	task, err := cont.Task(ctx, nil)
	if err != nil {
		return -1, ctxErr(notFound("exec in container "+id+": not running", err))
	}
	spec, err := cont.Spec(ctx)
	if err != nil {
		return -1, ctxErr(fmt.Errorf("exec in container %s: %w", id, err))
	}
	pspec := *spec.Process
	pspec.Args = cmd
	pspec.Terminal = tty

	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	// When stdin ends, the process must see EOF: the shim keeps its end of the FIFO open until
	// told with CloseIO.
	procC := make(chan containerd.Process, 1)
	execDone := make(chan struct{})
	defer close(execDone)
	var in io.Reader
	if stdin != nil {
		in = &eofNotifier{r: stdin, onEOF: func() {
			select {
			case p := <-procC:
				procC <- p
				_ = p.CloseIO(context.WithoutCancel(ctx), containerd.WithStdinCloser)
			case <-execDone:
			}
		}}
	}
	opts := []cio.Opt{cio.WithStreams(in, stdout, stderr), cio.WithFIFODir(r.fifoDir())}
	if tty {
		opts = append(opts, cio.WithTerminal)
	}
	execID := "exec-" + randomHex(6)
	proc, err := task.Exec(ctx, execID, &pspec, cio.NewCreator(opts...))
	if err != nil {
		return -1, ctxErr(fmt.Errorf("exec in container %s: %w", id, err))
	}
	procC <- proc
	// Delete with a context that outlives ctx, so a cancelled exec leaves no process record.
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, _ = proc.Delete(dctx, containerd.WithProcessKill)
	}()
	exitC, err := proc.Wait(ctx)
	if err != nil {
		return -1, ctxErr(fmt.Errorf("exec in container %s: wait: %w", id, err))
	}
	if err := proc.Start(ctx); err != nil {
		return -1, ctxErr(fmt.Errorf("exec %v in container %s: %w", cmd, id, err))
	}
	select {
	case st := <-exitC:
		code, _, err := st.Result()
		if err != nil {
			// A wait cut short by ctx ends with the RPC's error, not ctx's.
			return -1, ctxErr(fmt.Errorf("exec in container %s: %w", id, err))
		}
		// Let the output drain, unless a background child keeps the pipes open.
		drained := make(chan struct{})
		go func() { proc.IO().Wait(); close(drained) }()
		select {
		case <-drained:
		case <-time.After(2 * time.Second):
		}
		return int(code), nil
	case <-ctx.Done():
		_ = proc.Kill(context.WithoutCancel(ctx), syscall.SIGKILL)
		return -1, fmt.Errorf("exec in container %s: %w", id, ctx.Err())
	}
}

func (r *Runtime) fifoDir() string {
	if r.cfg.Dir != "" {
		return filepath.Join(r.cfg.Dir, "fifo")
	}
	return defaults.DefaultFIFODir
}

type eofNotifier struct {
	r     io.Reader
	onEOF func()
	done  bool
}

func (e *eofNotifier) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && !e.done {
		e.done = true
		go e.onEOF()
	}
	return n, err
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
