// Package authz holds what the site's authorization shares between the API server and the
// commands that make credentials for it; the RBAC authorizer itself is in package rbac.
package authz

// PlannersGroup is the group of plan-only users, such as the kubeconfig of a CI job that runs
// `flotilla plan` (made by `flotilla kubeconfig create --plan-only`). Its members may get,
// list and watch every resource, with the values of Secrets redacted; every write (create,
// update, patch, delete) is refused unless it is a dry-run, so a plan can dry-run what
// gitsync would apply and nothing on the site changes.
const PlannersGroup = "flotilla:planners"
