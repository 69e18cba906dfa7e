package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Defaults the server applies to a GitSource (see reconciler/apiserver defaulting).
const (
	// DefaultBranch is checked out when spec.ref names no branch, tag or commit.
	DefaultBranch = "main"
	// DefaultInterval is the fetch interval when spec.interval is unset or zero.
	DefaultInterval = time.Minute
	// MinInterval is the shortest spec.interval the API accepts.
	MinInterval = 10 * time.Second
	// DefaultHealthTimeout is how long an applied revision has to become healthy, when
	// spec.wait or spec.rollback asks for it and spec.rollback.healthTimeout is unset.
	DefaultHealthTimeout = 5 * time.Minute
	// MinHealthTimeout is the shortest spec.rollback.healthTimeout the API accepts.
	MinHealthTimeout = 10 * time.Second
	// DefaultSoak is how long the sites of spec.rollout.after must report a revision
	// healthy before this site applies it, when spec.rollout.soak is unset.
	DefaultSoak = 10 * time.Minute
	// DefaultStatusInterval is how often a site publishes its status when nothing changes
	// (spec.statusPush.interval unset); MinStatusInterval the shortest the API accepts.
	DefaultStatusInterval = 10 * time.Minute
	MinStatusInterval     = 10 * time.Second
)

// Condition types recorded in GitSourceStatus.Conditions (the flux/kstatus set).
const (
	// ConditionReady is True when the last attempted revision was fetched, verified,
	// rendered and applied (with spec.wait or spec.rollback, and its objects healthy).
	// Whether the applied objects are healthy is ConditionHealthy.
	ConditionReady = "Ready"
	// ConditionHealthy is True when every applied object is healthy as kstatus computes it
	// (Deployments available, Jobs complete, ...); its message lists what still progresses.
	// A source that dependsOn this one waits until both Ready and Healthy are True.
	ConditionHealthy = "Healthy"
	// ConditionReconciling is True while a fetch/apply of a new revision is in progress.
	ConditionReconciling = "Reconciling"
	// ConditionStalled is True when reconciliation cannot progress without a change by
	// a human (bad URL, failed verification, invalid manifests).
	ConditionStalled = "Stalled"
	// ConditionWarning is True while the source works but is set up in a way that is not
	// safe (spec.insecure with an http:// or git:// URL); its message says what to change.
	ConditionWarning = "Warning"
	// ConditionRollout is set with spec.rollout: True when the fetched revision is
	// applied, False while it is held for the sites of spec.rollout.after (reason
	// RolloutWaiting while they have not run it healthy for the soak, RolloutHeld when one
	// of them rolled it back or reports it Degraded).
	ConditionRollout = "Rollout"
	// ConditionStatusPublished is True when the site's status was last published to the
	// repository (spec.statusPush), False with the reason it is not.
	ConditionStatusPublished = "StatusPublished"
)

// Values of GitSourceStatus.Health.
const (
	HealthHealthy     = "Healthy"
	HealthProgressing = "Progressing"
	HealthDegraded    = "Degraded"
	HealthUnknown     = "Unknown"
)

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// GitSource is a git repository (at a ref and path) whose rendered manifests
// Flotilla applies to the cluster and keeps applied.
// +k8s:supportsSubresource="/status"
type GitSource struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state: where to fetch from and how to apply.
	// +optional
	Spec GitSourceSpec `json:"spec,omitempty"`

	// Status is what the last reconciliation observed and did.
	// +optional
	Status GitSourceStatus `json:"status,omitempty"`
}

// GitSourceSpec says which git repository, ref and path to apply, how often, and how.
type GitSourceSpec struct {
	// URL of the git repository: https://, ssh://, git@host:path, or file:///absolute/path
	// for a local repository, with no credentials in it (they belong in spec.secretRef).
	// http:// and git:// are refused unless spec.insecure is true.
	// +required
	// +k8s:validation:minLength=1
	URL string `json:"url"`

	// Ref is the git reference to check out: exactly one of branch, tag, semver or
	// commit. The server sets branch "main" when none is given.
	// +optional
	Ref *GitRef `json:"ref,omitempty"`

	// Path is the directory inside the repository to render (kustomization or plain
	// manifests): relative, without "..". Defaults to the repository root.
	// +optional
	Path string `json:"path,omitempty"`

	// Interval is how often the repository is fetched and the objects re-applied: at
	// least 10s. The server sets 1m when it is unset or zero.
	// +optional
	// +default="1m"
	Interval metav1.Duration `json:"interval,omitempty"`

	// Timeout bounds one fetch/render/apply round. Defaults to the interval.
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// SecretRef names a Secret in the GitSource's namespace with the credentials for
	// the remote: "username"/"password" (HTTPS) or "identity"/"known_hosts" (SSH), and for
	// HTTPS optionally "ca.crt", the PEM CA certificates the server's certificate must
	// chain to (instead of the host's trusted roots). A change to the Secret fetches again.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`

	// WebhookSecretRef names a Secret in the GitSource's namespace whose "token" key
	// authenticates push webhooks sent to /hooks/git/<namespace>/<name> (on the webhook
	// port when the host serves one, --webhook-port, and on the API port):
	// GitHub and Gitea sign the body with it (HMAC-SHA256, X-Hub-Signature-256 /
	// X-Gitea-Signature), GitLab sends it as X-Gitlab-Token. A verified push fetches at once.
	// Without it the source accepts no webhooks.
	// +optional
	WebhookSecretRef *LocalObjectReference `json:"webhookSecretRef,omitempty"`

	// Verify, when set, requires the fetched commit to be signed by a trusted key.
	// +optional
	Verify *GitVerification `json:"verify,omitempty"`

	// Prune deletes objects that were applied from an earlier revision and are no
	// longer rendered. The server sets true when unset.
	// +optional
	// +default=true
	Prune *bool `json:"prune,omitempty"`

	// DependsOn lists GitSources that must be Ready and Healthy (at their last applied
	// revision) before this one is applied.
	// +optional
	// +listType=atomic
	DependsOn []NamespacedObjectReference `json:"dependsOn,omitempty"`

	// ServiceAccountName names a ServiceAccount in the GitSource's namespace whose
	// permissions the source's objects are dry-run, applied, pruned and read with: gitsync
	// impersonates system:serviceaccount:<namespace>:<name>, so a revision with an object
	// the ServiceAccount may not change is refused whole. Required for every GitSource but
	// kube-system/root (the host's own source), which applies with gitsync's own identity
	// when it is unset.
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// Suspend stops fetching and applying; the objects already applied stay as they are.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// Wait makes Ready True only once every applied object is healthy (the health of
	// status.health, per kind): until then Ready is False with reason Progressing, and
	// after spec.rollback.healthTimeout (default 5m) with reason HealthCheckFailed naming
	// the first object that is not healthy. spec.rollback waits whether or not it is set.
	// +optional
	Wait bool `json:"wait,omitempty"`

	// Rollback re-applies the last healthy revision when an applied revision does not
	// become healthy in time.
	// +optional
	Rollback *GitRollback `json:"rollback,omitempty"`

	// Rollout holds a new revision until the sites it waits for (other sites following
	// the same repository) report it healthy: the waves of a fleet.
	// +optional
	Rollout *GitRollout `json:"rollout,omitempty"`

	// StatusPush publishes this site's status (revision applied, health, rollback, hosts,
	// workloads) to the repository, where `flotilla fleet status` and the spec.rollout of
	// other sites read it.
	// +optional
	StatusPush *GitStatusPush `json:"statusPush,omitempty"`

	// Insecure allows an http:// or git:// URL, whose content a network attacker can
	// change on the way (set spec.verify to detect that). Credentials are never sent over
	// such a URL: spec.secretRef is refused with it. The status carries a Warning condition
	// while it is in use.
	// +optional
	Insecure bool `json:"insecure,omitempty"`
}

// GitRollback configures the automatic revert of a revision that does not become healthy.
type GitRollback struct {
	// Enabled turns the revert on. When a revision applied is not healthy within
	// healthTimeout (a Deployment past its progress deadline, pods crash-looping or
	// failing to pull, a Job failed, a dependency unhealthy), gitsync re-applies the last
	// revision that was healthy (status.lastHealthyRevision), sets Ready False with reason
	// RolledBack naming the revision and its first failing object (status.rolledBack), and
	// does not apply that revision again until a new commit arrives. A rollback deletes no
	// data: PersistentVolumeClaims, PersistentVolumes, Namespaces,
	// CustomResourceDefinitions and objects annotated flotilla.dev/prune: disabled that the
	// bad revision added stay (and stay in the inventory, pruned by a later revision that no
	// longer has them).
	// +optional
	Enabled bool `json:"enabled,omitempty"`

	// HealthTimeout is how long an applied revision has to become healthy: at least 10s.
	// Defaults to 5m.
	// +optional
	HealthTimeout *metav1.Duration `json:"healthTimeout,omitempty"`
}

// GitRollout configures a staged rollout across the sites of a fleet.
type GitRollout struct {
	// After selects the sites that must run a revision first: this site applies a new
	// revision only once every site After matches reports it Healthy, for at least Soak.
	// When one of them reports it rolled back or Degraded, this site holds the revision it
	// runs and says why in its Rollout condition. A site never waits for itself.
	// +required
	After RolloutAfter `json:"after"`

	// Soak is how long the sites of After must have run the revision healthy. Defaults
	// to 10m; 0s applies as soon as they report it Healthy.
	// +optional
	Soak *metav1.Duration `json:"soak,omitempty"`
}

// RolloutAfter selects sites by name, by their labels (flotilla agent --site-labels), or
// both: a site matched by either is waited for. At least one is set.
type RolloutAfter struct {
	// Sites are site names (flotilla agent --site).
	// +optional
	// +listType=set
	Sites []string `json:"sites,omitempty"`

	// Selector is a label selector over the sites' labels, in kubectl's syntax
	// ("tier=canary", "tier in (canary,early)", "!late").
	// +optional
	Selector string `json:"selector,omitempty"`
}

// GitStatusPush configures the publication of the site's status to the repository.
type GitStatusPush struct {
	// SecretRef names a Secret in the GitSource's namespace with credentials allowed to
	// push (the keys of spec.secretRef). Unset: spec.secretRef's credentials are used,
	// or none (a file:// repository, or a server that takes anonymous pushes).
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`

	// Interval is how often the status is published when nothing changes, as a
	// heartbeat (a site silent for three intervals is shown stale). It is published at
	// once after every apply and change of health. At least 10s; defaults to 10m.
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`

	// Branch writes to branch flotilla-status/<site> instead of ref
	// refs/flotilla/status/<site>, for git hosts that refuse refs outside refs/heads
	// and refs/tags.
	// +optional
	Branch bool `json:"branch,omitempty"`
}

// GitSourceRollback records a revision that was rolled back.
type GitSourceRollback struct {
	// Revision is the revision that did not become healthy and is not applied again until
	// a new commit arrives.
	// +required
	Revision string `json:"revision"`

	// To is the revision re-applied in its place (the last healthy one).
	// +required
	To string `json:"to"`

	// Reason is the first object of Revision that was not healthy, and why:
	// "Kind namespace/name: message".
	// +optional
	Reason string `json:"reason,omitempty"`

	// Time is when the rollback was decided.
	// +optional
	Time metav1.Time `json:"time,omitempty"`
}

// GitRef selects what to check out. Exactly one field is set (the server sets branch
// "main" when none is).
// +k8s:validation:maxProperties=1
type GitRef struct {
	// Branch to follow (its head is re-resolved on every fetch).
	// +optional
	Branch string `json:"branch,omitempty"`

	// Tag to check out.
	// +optional
	Tag string `json:"tag,omitempty"`

	// Semver is a semantic version range (such as ">=1.2.0 <2.0.0" or "~1.4"): the tag
	// of the highest version in the range is checked out, re-resolved on every fetch.
	// Tags are read as versions with or without a leading "v"; pre-releases only match a
	// range that names one.
	// +optional
	Semver string `json:"semver,omitempty"`

	// Commit SHA-1 to check out (full 40 hex digits).
	// +optional
	Commit string `json:"commit,omitempty"`
}

// LocalObjectReference names an object in the same namespace as the referrer.
// +structType=atomic
type LocalObjectReference struct {
	// Name of the referent.
	// +required
	Name string `json:"name"`
}

// NamespacedObjectReference names an object, by default in the referrer's namespace.
// +structType=atomic
type NamespacedObjectReference struct {
	// Namespace of the referent; the referrer's namespace when empty.
	// +optional
	Namespace string `json:"namespace,omitempty"`

	// Name of the referent.
	// +required
	Name string `json:"name"`
}

// VerifyMode says which commits must carry a trusted signature.
// +enum
type VerifyMode string

const (
	// VerifyModeNone fetches without checking signatures.
	VerifyModeNone VerifyMode = "none"
	// VerifyModeHead requires the checked-out commit (the head of the ref) to be signed.
	VerifyModeHead VerifyMode = "head"
)

// GitVerification configures signature verification of the fetched commit.
type GitVerification struct {
	// Mode is "none" or "head".
	// +required
	Mode VerifyMode `json:"mode"`

	// SecretRef names a Secret in the GitSource's namespace whose data values are the
	// trusted OpenPGP public keys (ASCII-armored, one or more per value). Required for
	// mode "head".
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`
}

// GitSourceStatus is what the last reconciliation observed and did.
type GitSourceStatus struct {
	// ObservedGeneration is the metadata.generation the status was computed for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions are Ready, Reconciling and Stalled, each with a reason and a message
	// a human can act on.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`

	// LastFetchedRevision is the last revision fetched (and verified), as "<ref>@sha1:<commit>".
	// +optional
	LastFetchedRevision string `json:"lastFetchedRevision,omitempty"`

	// LastAppliedRevision is the last revision applied successfully.
	// +optional
	LastAppliedRevision string `json:"lastAppliedRevision,omitempty"`

	// LastAttemptedRevision is the last revision an apply was attempted for, successful or not.
	// +optional
	LastAttemptedRevision string `json:"lastAttemptedRevision,omitempty"`

	// LastAppliedTime is when LastAppliedRevision was first applied (the health timeout of
	// spec.wait and spec.rollback counts from it).
	// +optional
	LastAppliedTime *metav1.Time `json:"lastAppliedTime,omitempty"`

	// LastHealthyRevision is the last revision that was applied and then healthy, the one
	// spec.rollback re-applies.
	// +optional
	LastHealthyRevision string `json:"lastHealthyRevision,omitempty"`

	// RolledBack is set while a revision is rolled back (spec.rollback): cleared when a new
	// commit arrives.
	// +optional
	RolledBack *GitSourceRollback `json:"rolledBack,omitempty"`

	// HeldRevision is the revision fetched but not applied because spec.rollout waits for
	// other sites (the Rollout condition says which and why).
	// +optional
	HeldRevision string `json:"heldRevision,omitempty"`

	// HealthySince is when the applied revision became healthy (unset while it is not).
	// +optional
	HealthySince *metav1.Time `json:"healthySince,omitempty"`

	// Site is the site this source reports as (flotilla agent --site), and
	// LastPublishedTime when its status was last published (spec.statusPush).
	// +optional
	Site string `json:"site,omitempty"`
	// +optional
	LastPublishedTime *metav1.Time `json:"lastPublishedTime,omitempty"`

	// Inventory lists the objects applied from LastAppliedRevision; pruning deletes
	// the entries that the next revision no longer renders.
	// +optional
	Inventory *ResourceInventory `json:"inventory,omitempty"`

	// Health summarises the applied objects: Healthy, Progressing, Degraded or Unknown.
	// +optional
	Health string `json:"health,omitempty"`

	// Progressing lists the applied objects that are not healthy yet, one line each:
	// "Kind namespace/name: why" (at most 50 lines).
	// +optional
	// +listType=atomic
	Progressing []string `json:"progressing,omitempty"`
}

// ResourceInventory is the set of objects a GitSource applied.
type ResourceInventory struct {
	// Entries, one per applied object.
	// +optional
	// +listType=map
	// +listMapKey=id
	Entries []ResourceRef `json:"entries,omitempty"`
}

// ResourceRef identifies one applied object.
type ResourceRef struct {
	// ID is "<namespace>_<name>_<group>_<kind>" (namespace and group empty for
	// cluster-scoped objects and the core group).
	// +required
	ID string `json:"id"`

	// Version is the API version of the object as applied (e.g. "v1").
	// +required
	Version string `json:"v"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// GitSourceList is a list of GitSources.
type GitSourceList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`

	// Items is the list of GitSources.
	Items []GitSource `json:"items"`
}
