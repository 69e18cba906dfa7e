package runtime

import (
	"context"
	"time"

	apievents "github.com/containerd/containerd/api/events"
	tasksapi "github.com/containerd/containerd/api/services/tasks/v1"
	tasktypes "github.com/containerd/containerd/api/types/task"
	"github.com/containerd/typeurl/v2"
)

// watchEvents records container exits and OOM kills as they happen, and after every
// (re)subscription sweeps tasks that stopped while nobody listened (agent or containerd down).
func (r *Runtime) watchEvents(ctx context.Context) {
	for ctx.Err() == nil {
		sctx, cancel := context.WithCancel(r.ns(ctx))
		envC, errC := r.client.Subscribe(sctx,
			`topic=="/tasks/exit",namespace==`+r.cfg.Namespace,
			`topic=="/tasks/oom",namespace==`+r.cfg.Namespace)
		r.sweep(ctx)
	loop:
		for {
			select {
			case <-ctx.Done():
				cancel()
				return
			case err := <-errC:
				if ctx.Err() == nil && err != nil {
					r.log.WithError(err).Debug("containerd event stream ended; resubscribing")
				}
				break loop
			case env := <-envC:
				if env == nil {
					continue
				}
				ev, err := typeurl.UnmarshalAny(env.Event)
				if err != nil {
					continue
				}
				switch e := ev.(type) {
				case *apievents.TaskExit:
					if e.ID == e.ContainerID { // the init process, not an exec
						go r.reap(ctx, e.ContainerID)
					}
				case *apievents.TaskOOM:
					r.markOOM(ctx, e.ContainerID)
				}
			}
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (r *Runtime) markOOM(ctx context.Context, id string) {
	ctx = r.ns(ctx)
	cont, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return
	}
	if _, err := cont.SetLabels(ctx, map[string]string{labelOOMKilled: "true"}); err != nil {
		r.log.WithError(err).WithField("container", id).Warn("record OOM kill")
	}
}

// sweep reaps every stopped task.
func (r *Runtime) sweep(ctx context.Context) {
	resp, err := r.client.TaskService().List(r.ns(ctx), &tasksapi.ListTasksRequest{})
	if err != nil {
		return
	}
	for _, p := range resp.Tasks {
		if p.Status == tasktypes.Status_STOPPED {
			r.reap(ctx, p.ID)
		}
	}
}
