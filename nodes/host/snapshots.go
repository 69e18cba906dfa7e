package host

import (
	"context"
	"path/filepath"

	"github.com/sirupsen/logrus"

	"github.com/flotilla-dev/flotilla/nodes/snapshot"
)

// startSnapshots runs --snapshot-schedule: this server host saves an etcd snapshot (with the
// site CA, join token and admin token) to <data-dir>/snapshots at every tick, keeping the
// newest --snapshot-retention. A failed one is logged and tried again at the next tick.
func (h *Host) startSnapshots() {
	if h.cfg.SnapshotSchedule == "" || !h.cfg.Etcd {
		return
	}
	sched, err := snapshot.ParseSchedule(h.cfg.SnapshotSchedule)
	if err != nil { // Complete checked it
		h.log.WithError(err).Error("--snapshot-schedule")
		return
	}
	s := &snapshot.Schedule{
		Schedule: sched, Retention: h.cfg.SnapshotRetention, Dir: filepath.Join(h.dataDir, "snapshots"),
		Log: h.log.WithFields(logrus.Fields{"component": "snapshot"}),
		Save: func(ctx context.Context, out string) (*snapshot.Manifest, error) {
			o := snapshot.SaveOptions{DataDir: h.dataDir, Out: out, Host: h.cfg.Name, Version: Version, Token: h.token.String()}
			if h.etcdMember() != nil {
				o.Endpoint = h.clientURL.String()
			}
			return snapshot.Save(ctx, o)
		},
	}
	go s.Run(h.runCtx)
}
