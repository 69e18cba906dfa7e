package rbac

import (
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// JoinUser is the identity of the join endpoint every server host serves (reconciler/etcd
// JoinServer): for a worker that presents the join token it files the worker's two
// CertificateSigningRequests, approves them and waits for the signer. Its ClusterRole and
// binding have the same name.
const JoinUser = "system:flotilla:join"

// joinRules: create, get (polling for the certificate) and approve CertificateSigningRequests,
// for the two signers a worker's certificates come from only; get the site's current join
// token (Secret flotilla-join-token, its hash) and get and update the list of removed hosts
// (ConfigMap flotilla-revoked-hosts, to mark one readmitted), both in kube-system
// (reconciler/hostaccess).
var joinRules = []rbacv1.PolicyRule{
	{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"flotilla-join-token"}},
	{Verbs: []string{"get", "update"}, APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"flotilla-revoked-hosts"}},
	rule(verbs("create", "get"), "certificates.k8s.io", "certificatesigningrequests"),
	rule(verbs("update"), "certificates.k8s.io", "certificatesigningrequests/approval"),
	{Verbs: []string{"approve"}, APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"signers"},
		ResourceNames: []string{"kubernetes.io/kube-apiserver-client-kubelet", "kubernetes.io/kubelet-serving"}},
}

// joinClusterRole and joinClusterRoleBinding are JoinUser's.
func joinClusterRole() rbacv1.ClusterRole {
	return rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: JoinUser}, Rules: copyRules(joinRules)}
}

func joinClusterRoleBinding() rbacv1.ClusterRoleBinding {
	return componentBinding(JoinUser, JoinUser, rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: JoinUser})
}
