package agent

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	rt "github.com/flotilla-dev/flotilla/nodes/runtime"
)

// pullCredentials returns the credentials the pod's imagePullSecrets hold for image, in the
// order of the secrets and, within one, most specific key first. Secrets that are missing, of
// another type or unreadable are reported in problems and skipped, as the kubelet does; an
// error means the API has not answered yet and the pull should wait.
func pullCredentials(pod *corev1.Pod, image string, secret func(ns, name string) (*corev1.Secret, error)) (creds []rt.Credential, problems []string, err error) {
	for _, ref := range pod.Spec.ImagePullSecrets {
		if ref.Name == "" {
			continue
		}
		s, err := secret(pod.Namespace, ref.Name)
		if apierrors.IsNotFound(err) {
			problems = append(problems, fmt.Sprintf("secret %q not found", ref.Name))
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("image pull secret %q: %w", ref.Name, err)
		}
		var dc rt.DockerConfig
		switch s.Type {
		case corev1.SecretTypeDockerConfigJson:
			dc, err = rt.ParseDockerConfigJSON(s.Data[corev1.DockerConfigJsonKey])
		case corev1.SecretTypeDockercfg:
			dc, err = rt.ParseDockerCfg(s.Data[corev1.DockerConfigKey])
		default:
			problems = append(problems, fmt.Sprintf("secret %q is of type %q, not %s or %s", ref.Name, s.Type,
				corev1.SecretTypeDockerConfigJson, corev1.SecretTypeDockercfg))
			continue
		}
		if err != nil {
			problems = append(problems, fmt.Sprintf("secret %q: %v", ref.Name, err))
			continue
		}
		creds = append(creds, dc.Credentials(image)...)
	}
	return creds, problems, nil
}

// pullSecretsProblem is the kubelet's event message for unusable pull secrets.
func pullSecretsProblem(problems []string) string {
	return "Unable to retrieve some image pull secrets (" + strings.Join(problems, "; ") + "); attempting to pull the image may not succeed."
}
