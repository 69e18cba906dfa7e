package main

import (
	"github.com/flotilla-dev/flotilla/reconciler/controllers"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/deployment"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/garbagecollector"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/namespace"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/replicaset"
	"github.com/flotilla-dev/flotilla/reconciler/controllers/serviceaccount"
)

// controllerList is every controller the leader runs.
func controllerList() []controllers.Named {
	return []controllers.Named{
		{Name: "replicaset", New: replicaset.New, Workers: 3},
		{Name: "deployment", New: deployment.New, Workers: 3},
		{Name: "serviceaccount", New: serviceaccount.New, Workers: 1},
		{Name: "garbagecollector", New: func(c *controllers.Context) (controllers.Runner, error) { return garbagecollector.New(c) }, Workers: 3},
		{Name: "namespace", New: func(c *controllers.Context) (controllers.Runner, error) { return namespace.New(c) }, Workers: 2},
	}
}
